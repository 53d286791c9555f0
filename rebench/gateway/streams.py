"""Streams (server-sent events) from the upstream to the client, event by event: passed through when
both speak the same API, else converted through Chat Completions chunks; the usage the upstream's
stream reports at its end is what the request is charged.

`Relay.feed` takes each upstream event (its name and data) and returns the bytes to send on;
`Relay.end` the closing events once the upstream ended; `Relay.cut` the error event that ends a
stream cut part-way. A stream is complete only when the upstream sent its own last event
(`[DONE]`, `message_stop`, `response.completed`); one that stops before is cut.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rebench.gateway.formats import DONE, dumps, error_event, sse
from rebench.gateway.replies import call_item, message_item, new_id, response_object
from rebench.gateway.translate import ANTHROPIC_STOP, CHAT_STOP

Event = tuple[str, dict[str, Any]]


class UpstreamStreamError(Exception):
    """The upstream's stream carried an error event."""


def _chunk(state: Any, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": state.id, "object": "chat.completion.chunk", "created": state.created, "model": state.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}


def _chunk_usage(chunk: dict[str, Any]) -> tuple[int, int] | None:
    """(prompt, completion) tokens of a chat chunk that reports usage (the stream's last), else None."""
    usage = chunk.get("usage")
    if not usage:
        return None
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _first_choice(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunk's choice 0, if it has one: the other APIs have no `n`, so only it is converted."""
    return [choice for choice in chunk.get("choices") or [] if not choice.get("index", 0)]


class MessagesToChat:
    """Anthropic Messages events -> chat chunks (usage in a last chunk with no choices)."""

    def __init__(self) -> None:
        self.id, self.created, self.model = new_id("chatcmpl-"), int(time.time()), ""
        self.calls: dict[int, int] = {}
        self.stop = "stop"
        self.usage = [0, 0]

    def feed(self, name: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        if name == "message_start":
            message = data.get("message") or {}
            self.model = message.get("model", "")
            usage = message.get("usage") or {}
            self.usage = [sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                                "cache_read_input_tokens")),
                          int(usage.get("output_tokens") or 0)]
            return [_chunk(self, {"role": "assistant", "content": ""})]
        if name == "content_block_start":
            block = data.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.calls[int(data.get("index", 0))] = len(self.calls)
                return [_chunk(self, {"tool_calls": [{"index": len(self.calls) - 1, "id": block.get("id"),
                                                      "type": "function",
                                                      "function": {"name": block.get("name"), "arguments": ""}}]})]
        elif name == "content_block_delta":
            delta = data.get("delta") or {}
            if delta.get("type") == "text_delta":
                return [_chunk(self, {"content": delta.get("text", "")})]
            if delta.get("type") == "input_json_delta" and int(data.get("index", 0)) in self.calls:
                return [_chunk(self, {"tool_calls": [{"index": self.calls[int(data.get("index", 0))],
                                                      "function": {"arguments": delta.get("partial_json", "")}}]})]
        elif name == "message_delta":
            self.stop = ANTHROPIC_STOP.get(str((data.get("delta") or {}).get("stop_reason")), "stop")
            usage = data.get("usage") or {}
            self.usage[1] = int(usage.get("output_tokens") or self.usage[1])
        elif name == "message_stop":
            usage = {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1],
                     "total_tokens": sum(self.usage)}
            return [_chunk(self, {}, self.stop), {**_chunk(self, {}), "choices": [], "usage": usage}]
        elif name == "error":
            raise UpstreamStreamError(str((data.get("error") or {}).get("message", "error event")))
        return []


class ChatToMessages:
    """Chat chunks -> Anthropic Messages events (one sample: a translated request asks for one)."""

    def __init__(self) -> None:
        self.started = False
        self.index = -1
        self.open: str | None = None
        self.tools: dict[int, int] = {}
        self.stop = "end_turn"
        self.usage = (0, 0)

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _start(self, block: dict[str, Any], kind: str) -> list[Event]:
        events = self._close()
        self.index += 1
        self.open = kind
        return [*events, ("content_block_start", {"type": "content_block_start", "index": self.index,
                                                  "content_block": block})]

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if not self.started:
            self.started = True
            out.append(("message_start", {"type": "message_start", "message": {
                "id": new_id("msg_"), "type": "message", "role": "assistant", "model": chunk.get("model"),
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}))
        self.usage = _chunk_usage(chunk) or self.usage
        for choice in _first_choice(chunk):
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.open != "text":
                    out += self._start({"type": "text", "text": ""}, "text")
                out.append(("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                    "delta": {"type": "text_delta", "text": delta["content"]}}))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                if call.get("index", 0) not in self.tools:
                    out += self._start({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                                        "input": {}}, "tool")
                    self.tools[call.get("index", 0)] = self.index
                if function.get("arguments"):
                    out.append(("content_block_delta", {
                        "type": "content_block_delta", "index": self.tools[call.get("index", 0)],
                        "delta": {"type": "input_json_delta", "partial_json": function["arguments"]}}))
            if choice.get("finish_reason"):
                self.stop = CHAT_STOP.get(str(choice["finish_reason"]), "end_turn")
        return out

    def finish(self) -> list[Event]:
        usage = {"input_tokens": self.usage[0], "output_tokens": self.usage[1]}
        return [*self._close(),
                ("message_delta", {"type": "message_delta", "delta": {"stop_reason": self.stop, "stop_sequence": None},
                                   "usage": usage}),
                ("message_stop", {"type": "message_stop"})]


class ChatToResponses:
    """Chat chunks -> OpenAI Responses events, with the output items' added/delta/done sequence."""

    def __init__(self) -> None:
        self.sequence = 0
        self.id, self.created, self.model = new_id("resp_"), int(time.time()), None
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        self.tools: dict[int, dict[str, Any]] = {}
        self.stop: str | None = None
        self.usage = (0, 0)

    def _event(self, name: str, **payload: Any) -> Event:
        self.sequence += 1
        return name, {"type": name, "sequence_number": self.sequence - 1, **payload}

    def _close(self) -> list[Event]:
        item, self.open = self.open, None
        if item is None:
            return []
        where = {"item_id": item["id"], "output_index": self.output.index(item)}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            item["status"] = "completed"
            part = item["content"][0]
            events = [self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                      self._event("response.content_part.done", **where, content_index=0, part=part)]
        else:
            item["status"] = "completed"
            events = [self._event("response.function_call_arguments.done", **where, arguments=item["arguments"])]
        return [*events, self._event("response.output_item.done", output_index=where["output_index"], item=item)]

    def _open(self, item: dict[str, Any]) -> list[Event]:
        events = self._close()
        self.output.append(item)
        self.open = item
        shown = {**item, "content": []} if item["type"] == "message" else item
        events.append(self._event("response.output_item.added", output_index=len(self.output) - 1, item=shown))
        if item["type"] == "message":
            events.append(self._event("response.content_part.added", item_id=item["id"],
                                      output_index=len(self.output) - 1, content_index=0,
                                      part={"type": "output_text", "text": "", "annotations": [], "logprobs": []}))
        return events

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        if self.model is None:
            self.model = chunk.get("model")
            started = response_object(self.model, [], "in_progress", None, self.id, self.created)
            out += [self._event("response.created", response=started),
                    self._event("response.in_progress", response=started)]
        self.usage = _chunk_usage(chunk) or self.usage
        for choice in _first_choice(chunk):
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.open is None or self.open["type"] != "message":
                    out += self._open(message_item(new_id("msg_"), "", "in_progress"))
                assert self.open is not None
                self.open["content"][0]["text"] += delta["content"]
                out.append(self._event("response.output_text.delta", item_id=self.open["id"],
                                       output_index=len(self.output) - 1, content_index=0, delta=delta["content"],
                                       logprobs=[]))
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                if call.get("index", 0) not in self.tools:
                    item = call_item(new_id("fc_"), str(call.get("id")), str(function.get("name")), "", "in_progress")
                    out += self._open(item)
                    self.tools[call.get("index", 0)] = item
                item = self.tools[call.get("index", 0)]
                if function.get("arguments") and item is self.open:
                    item["arguments"] += function["arguments"]
                    out.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                           output_index=self.output.index(item), delta=function["arguments"]))
            if choice.get("finish_reason"):
                self.stop = choice["finish_reason"]
        return out

    def finish(self) -> list[Event]:
        status = "incomplete" if self.stop == "length" else "completed"
        done = response_object(self.model, self.output, status, self.usage, self.id, self.created)
        return [*self._close(), self._event(f"response.{status}", response=done)]


_LAST_EVENT = {"messages": ("message_stop",), "responses": ("response.completed", "response.incomplete",
                                                            "response.failed")}


class Relay:
    """One stream from an upstream speaking `upstream` to a client speaking `client`."""

    def __init__(self, upstream: str, client: str, include_usage: bool) -> None:
        self.upstream, self.client, self.include_usage = upstream, client, include_usage
        self.usage: tuple[int, int] | None = None
        self.complete = False
        self.events = 0
        self.to_chat = MessagesToChat() if upstream == "messages" and client != "messages" else None
        self.from_chat: ChatToMessages | ChatToResponses | None = None
        if client != upstream:
            self.from_chat = ChatToMessages() if client == "messages" else ChatToResponses() \
                if client == "responses" else None

    def feed(self, name: str, data: str) -> bytes:
        if self.upstream == self.client:
            return self._pass(name, data)
        if self.upstream == "chat" and data.strip() == "[DONE]":
            self.complete = True
            return b""
        parsed = json.loads(data)
        if isinstance(parsed, dict) and self.upstream == "chat" and parsed.get("error"):
            raise UpstreamStreamError(str(parsed["error"].get("message", parsed["error"])))
        chunks = self.to_chat.feed(name, parsed) if self.to_chat is not None else [parsed]
        if name == "message_stop":
            self.complete = True
        out = []
        for chunk in chunks:
            if chunk.get("usage"):
                usage = chunk["usage"]
                self.usage = (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
            if self.from_chat is None:  # a chat client
                if chunk.get("choices") or self.include_usage:
                    out.append(sse("chat", "", dumps(chunk)))
            else:
                out += [sse(self.client, event, dumps(payload)) for event, payload in self.from_chat.feed(chunk)]
        self.events += len(out)
        return b"".join(out)

    def _pass(self, name: str, data: str) -> bytes:
        """Same API on both sides: the event goes on as it came, read only for its usage."""
        if self.client == "chat":
            if data.strip() == "[DONE]":
                self.complete = True
                return b""
            if '"usage"' in data or '"error"' in data:
                parsed = json.loads(data)
                if parsed.get("error"):
                    raise UpstreamStreamError(str(parsed["error"].get("message", parsed["error"])))
                if parsed.get("usage"):
                    usage = parsed["usage"]
                    self.usage = (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
                    if not parsed.get("choices") and not self.include_usage:
                        return b""  # the gateway asked for usage; this caller did not
        else:
            if name == "error":
                parsed = json.loads(data)
                error = parsed.get("error") if isinstance(parsed.get("error"), dict) else parsed
                raise UpstreamStreamError(str(error.get("message", "error event")))
            if name in ("message_start", "message_delta") or name in _LAST_EVENT["responses"]:
                self._usage_of(name, json.loads(data))
            if name in _LAST_EVENT.get(self.client, ()):
                self.complete = True
        self.events += 1
        return sse(self.client, name, data)

    def _usage_of(self, name: str, data: dict[str, Any]) -> None:
        if name == "message_start":
            usage = (data.get("message") or {}).get("usage") or {}
            tokens_in = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                              "cache_read_input_tokens"))
            self.usage = (tokens_in, int(usage.get("output_tokens") or 0))
        elif name == "message_delta":
            usage = data.get("usage") or {}
            before = self.usage or (0, 0)
            self.usage = (before[0], int(usage.get("output_tokens") or before[1]))
        else:
            usage = (data.get("response") or {}).get("usage") or {}
            self.usage = (int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))

    def end(self) -> bytes:
        """The closing events once the upstream ended complete."""
        out = b""
        if self.from_chat is not None:
            out = b"".join(sse(self.client, event, dumps(payload)) for event, payload in self.from_chat.finish())
        return out + DONE if self.client == "chat" else out

    def cut(self, status: int, message: str, kind: str) -> bytes:
        """The error event that ends a stream cut part-way."""
        sequence = self.from_chat.sequence if isinstance(self.from_chat, ChatToResponses) else self.events
        return error_event(self.client, status, message, kind, sequence)
