"""What a model said in one gateway exchange: its text and tool calls, read from the answer the caller
got (whole, or the server-sent events of its stream) in the caller's API format. The flight recorder
of installed agents (rebench.gateway.agent_meter) stores them on each `model_call` event."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Said = tuple[str, list[dict[str, Any]]]


@dataclass
class Exchange:
    """One answered request as the caller sent it and as it got it back (a stream: the events' bytes)."""

    meter: str
    fmt: str
    endpoint: str
    model: str
    request: dict[str, Any]
    answer: dict[str, Any] | None
    stream: bytes | None
    status: int
    tokens: tuple[int, int]
    cost: float
    latency_s: float
    error: str | None = None


def server_sent_events(stream: bytes) -> list[tuple[str, Any]]:
    """(event name, parsed data) of each server-sent event; data that is not JSON is skipped."""
    found: list[tuple[str, Any]] = []
    for block in stream.decode("utf-8", errors="replace").split("\n\n"):
        name, data = "", []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if not data or data == ["[DONE]"]:
            continue
        try:
            found.append((name, json.loads("\n".join(data))))
        except ValueError:
            continue
    return found


def _anthropic(content: list[dict[str, Any]]) -> Said:
    text = "".join(str(block.get("text", "")) for block in content if block.get("type") == "text")
    calls = [{"id": block.get("id"), "name": block.get("name"), "arguments": block.get("input")}
             for block in content if block.get("type") in ("tool_use", "server_tool_use")]
    return text, calls


def _responses(output: list[dict[str, Any]]) -> Said:
    text, calls = "", []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            text += "".join(str(part.get("text", "")) for part in item.get("content") or []
                            if part.get("type") in ("output_text", "text"))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            arguments = item.get("arguments", item.get("input", item.get("action")))
            calls.append({"id": item.get("call_id"), "name": item.get("name", kind), "arguments": arguments})
    return text, calls


def _chat(message: dict[str, Any]) -> Said:
    calls = [{"id": call.get("id"), "name": (call.get("function") or {}).get("name"),
              "arguments": (call.get("function") or {}).get("arguments")} for call in message.get("tool_calls") or []]
    return str(message.get("content") or ""), calls


def said(fmt: str, answer: dict[str, Any] | None, stream: bytes | None) -> Said:
    """The text and tool calls of one answer in format `fmt` (chat, responses, messages)."""
    if answer is not None:
        if fmt == "messages":
            return _anthropic(answer.get("content") or [])
        if fmt == "responses":
            return _responses(answer.get("output") or [])
        choices = answer.get("choices") or [{}]
        return _chat(choices[0].get("message") or {})
    events = server_sent_events(stream or b"")
    if fmt == "responses":
        for name, data in events:
            if name == "response.completed" or data.get("type") == "response.completed":
                return _responses((data.get("response") or {}).get("output") or [])
        return "", []
    if fmt == "messages":
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, str] = {}
        for _name, data in events:
            index = int(data.get("index", 0)) if isinstance(data.get("index"), int) else 0
            if data.get("type") == "content_block_start":
                blocks[index] = dict(data.get("content_block") or {})
            elif data.get("type") == "content_block_delta":
                delta = data.get("delta") or {}
                block = blocks.setdefault(index, {"type": "text", "text": ""})
                if delta.get("type") == "text_delta":
                    block["text"] = block.get("text", "") + str(delta.get("text", ""))
                elif delta.get("type") == "input_json_delta":
                    partial[index] = partial.get(index, "") + str(delta.get("partial_json", ""))
        for index, text in partial.items():
            try:
                blocks[index]["input"] = json.loads(text) if text else {}
            except ValueError:
                blocks[index]["input"] = text
        return _anthropic([blocks[i] for i in sorted(blocks)])
    text, calls = "", dict[int, dict[str, Any]]()
    for _name, data in events:
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            text += str(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(call.get("index", 0), {"id": None, "name": None, "arguments": ""})
                entry["id"] = call.get("id") or entry["id"]
                function = call.get("function") or {}
                entry["name"] = function.get("name") or entry["name"]
                entry["arguments"] += str(function.get("arguments") or "")
    return text, [calls[i] for i in sorted(calls)]
