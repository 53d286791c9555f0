"""A streamed answer rebuilt whole from the server-sent events an installed agent got through its gateway.

The gateway stores a stream as the bytes it sent on (rebench.gateway.agent_meter); Inspect's converters
take a whole answer (an Anthropic `Message`, an OpenAI `Response` or `ChatCompletion`). Each API's events
are folded here into that whole answer, as its own SDK's stream helpers do. The gateway's own reading
of a stream (rebench.gateway.transcript.said) keeps only text and tool calls; this keeps everything the
converters read too (ids, stop reason, usage, thinking). None when the stream holds no such answer.
"""

from __future__ import annotations

import json
from typing import Any

from rebench.gateway.transcript import server_sent_events


def _dicts(stream: str) -> list[dict[str, Any]]:
    return [data for _name, data in server_sent_events(stream.encode()) if isinstance(data, dict)]


def anthropic_message(stream: str) -> dict[str, Any] | None:
    """The Message of a Messages stream: `message_start`'s, with each content block's deltas folded in."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for data in _dicts(stream):
        kind = data.get("type")
        index = data["index"] if isinstance(data.get("index"), int) else 0
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = dict(data["message"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            blocks[index] = dict(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            delta = data["delta"]
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta":
                partial[index] = partial.get(index, "") + str(delta.get("partial_json", ""))
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
            elif delta.get("type") == "signature_delta":
                block["signature"] = str(block.get("signature", "")) + str(delta.get("signature", ""))
        elif kind == "message_delta" and message is not None:
            message.update({k: v for k, v in (data.get("delta") or {}).items() if k in ("stop_reason",
                                                                                       "stop_sequence")})
            if isinstance(data.get("usage"), dict):
                message["usage"] = {**(message.get("usage") or {}), **data["usage"]}
    if message is None:
        return None
    for index, text in partial.items():
        try:
            blocks[index]["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[index]["input"] = {"unparsed arguments": text}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


FINAL_RESPONSE_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def responses_response(stream: str) -> dict[str, Any] | None:
    """The Response of a Responses stream: the one its last event carries whole (`response.completed`,
    or `.incomplete` / `.failed`); a stream cut before it: the one it started with, holding the output
    items that were done."""
    started: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    for data in _dicts(stream):
        kind = data.get("type")
        if kind in FINAL_RESPONSE_EVENTS and isinstance(data.get("response"), dict):
            return dict(data["response"])
        if kind == "response.created" and isinstance(data.get("response"), dict):
            started = dict(data["response"])
        elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            items[int(data.get("output_index") or 0)] = data["item"]
    if started is None:
        return None
    return {**started, "output": [items[i] for i in sorted(items)]}


def chat_completion(stream: str) -> dict[str, Any] | None:
    """The ChatCompletion of a Chat Completions stream: its chunks' deltas joined (first choice)."""
    first: dict[str, Any] | None = None
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish, usage = None, None
    for data in _dicts(stream):
        first = first or data
        usage = data.get("usage") or usage
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            text.append(str(delta.get("content") or ""))
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(int(call.get("index") or 0), {"id": "", "type": "function",
                                                                      "function": {"name": "", "arguments": ""}})
                entry["id"] = call.get("id") or entry["id"]
                function = call.get("function") or {}
                entry["function"]["name"] = function.get("name") or entry["function"]["name"]
                entry["function"]["arguments"] += str(function.get("arguments") or "")
    if first is None:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": first.get("id") or "stream", "object": "chat.completion", "created": first.get("created") or 0,
            "model": first.get("model") or "", "usage": usage,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": finish or ("tool_calls" if calls else "stop")}]}


def whole_answer(api: str, stream: str) -> dict[str, Any] | None:
    """The whole answer of a stream in `api` (messages, responses, chat)."""
    if api == "messages":
        return anthropic_message(stream)
    if api == "responses":
        return responses_response(stream)
    return chat_completion(stream)
