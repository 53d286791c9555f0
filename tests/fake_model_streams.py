"""The fake model server's OpenAI Responses answers and its streams (server-sent events) for all three
APIs, written the way each provider writes them, from the same scripted steps as the whole answers.

A step's text is streamed one piece at a time: split into `"chunks": N` equal pieces, else word by word.
`"cut_after": K` ends the stream after K events: `"cut": "close"` (the default) drops the connection
in the middle of the body, `"cut": "stall"` sends nothing more for `"stall_s"` seconds (default 30).
`"chunk_delay_s"` waits between events.
"""

from __future__ import annotations

import json
import time
from typing import Any


def pieces(step: dict[str, Any]) -> list[str]:
    text = str(step.get("text") or "")
    count = int(step.get("chunks") or 0)
    if count > 0 and text:
        size = -(-len(text) // count)
        return [text[i:i + size] for i in range(0, len(text), size)]
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)] if text else []


def _arguments(call: dict[str, Any]) -> str:
    return str(call.get("raw_arguments", json.dumps(call.get("arguments", {}))))


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def render_responses(step: dict[str, Any], body: dict[str, Any], n: int, usage: tuple[int, int, int]) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if step.get("text"):
        output.append({"id": f"msg_{n}", "type": "message", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": step["text"], "annotations": []}]})
    for i, call in enumerate(step.get("tool_calls", [])):
        output.append({"id": f"fc_{n}_{i}", "type": "function_call", "status": "completed",
                       "call_id": call.get("id", f"call_{n}_{i}"), "name": call["name"], "arguments": _arguments(call)})
    prompt, completion, cached = usage
    return {"id": f"resp_{n}", "object": "response", "created_at": int(time.time()),
            "status": "incomplete" if step.get("truncated") else "completed", "model": body.get("model", "scripted"),
            "output": output, "usage": {"input_tokens": prompt, "output_tokens": completion,
                                        "total_tokens": prompt + completion,
                                        "input_tokens_details": {"cached_tokens": cached},
                                        "output_tokens_details": {"reasoning_tokens": 0}}}


def openai_events(step: dict[str, Any], body: dict[str, Any], n: int, usage: tuple[int, int, int],
                  finish: str) -> list[tuple[str | None, str]]:
    base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": body.get("model", "scripted")}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> tuple[str | None, str]:
        return None, json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces(step)]
    for i, call in enumerate(step.get("tool_calls", [])):
        events.append(chunk({"tool_calls": [{"index": i, "id": call.get("id", f"call_{n}_{i}"), "type": "function",
                                             "function": {"name": call["name"], "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
                   for part in _halves(_arguments(call))]
    events.append(chunk({}, finish))
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt, completion, cached = usage
        events.append((None, json.dumps({**base, "choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}})))
    return [*events, (None, "[DONE]")]


def anthropic_events(step: dict[str, Any], body: dict[str, Any], n: int, usage: tuple[int, int, int],
                     stop: str) -> list[tuple[str | None, str]]:
    prompt, completion, cached = usage

    def event(name: str, **payload: Any) -> tuple[str | None, str]:
        return name, json.dumps({"type": name, **payload})

    events = [event("message_start", message={
        "id": f"msg_{n}", "type": "message", "role": "assistant", "model": body.get("model", "scripted"),
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt - cached, "output_tokens": 1, "cache_read_input_tokens": cached,
                  "cache_creation_input_tokens": 0}}), event("ping")]
    index = 0
    if step.get("text"):
        events.append(event("content_block_start", index=0, content_block={"type": "text", "text": ""}))
        events += [event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
                   for piece in pieces(step)]
        events.append(event("content_block_stop", index=0))
        index = 1
    for i, call in enumerate(step.get("tool_calls", [])):
        events.append(event("content_block_start", index=index, content_block={
            "type": "tool_use", "id": call.get("id", f"toolu_{n}_{i}"), "name": call["name"], "input": {}}))
        events += [event("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": part})
                   for part in _halves(_arguments(call))]
        events.append(event("content_block_stop", index=index))
        index += 1
    events.append(event("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
                        usage={"output_tokens": completion}))
    return [*events, event("message_stop")]


def responses_events(step: dict[str, Any], body: dict[str, Any], n: int,
                     usage: tuple[int, int, int]) -> list[tuple[str | None, str]]:
    final = render_responses(step, body, n, usage)
    sequence = iter(range(10**6))

    def event(name: str, **payload: Any) -> tuple[str | None, str]:
        return name, json.dumps({"type": name, "sequence_number": next(sequence), **payload})

    started = {**final, "status": "in_progress", "output": [], "usage": None}
    events = [event("response.created", response=started), event("response.in_progress", response=started)]
    for index, item in enumerate(final["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            events.append(event("response.output_item.added", output_index=index,
                                item={**item, "status": "in_progress", "content": []}))
            events.append(event("response.content_part.added", **where, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": []}))
            events += [event("response.output_text.delta", **where, content_index=0, delta=piece)
                       for piece in pieces(step)]
            events.append(event("response.output_text.done", **where, content_index=0, text=step["text"]))
            events.append(event("response.content_part.done", **where, content_index=0, part=item["content"][0]))
        else:
            events.append(event("response.output_item.added", output_index=index,
                                item={**item, "status": "in_progress", "arguments": ""}))
            events += [event("response.function_call_arguments.delta", **where, delta=part)
                       for part in _halves(item["arguments"])]
            events.append(event("response.function_call_arguments.done", **where, arguments=item["arguments"]))
        events.append(event("response.output_item.done", output_index=index, item=item))
    return [*events, event(f"response.{final['status']}", response=final)]


def encode(name: str | None, data: str) -> bytes:
    return (f"event: {name}\n" if name else "").encode() + f"data: {data}\n\n".encode()
