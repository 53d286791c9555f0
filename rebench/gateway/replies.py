"""Whole (not streamed) answers in one provider's format turned into another's, through Chat Completions,
and the token counts each format reports (what a request is charged for)."""

from __future__ import annotations

import json
import time
from typing import Any

from rebench.gateway.translate import ANTHROPIC_STOP, CHAT_STOP


def usage_of(fmt: str, reply: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens a reply in format `fmt` reports; Anthropic's cache reads and writes are input."""
    usage = reply.get("usage") or {}
    if fmt in ("chat", "completions"):
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    if fmt == "responses":
        return int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    return (int(usage.get("input_tokens") or 0) + int(usage.get("cache_creation_input_tokens") or 0)
            + int(usage.get("cache_read_input_tokens") or 0)), int(usage.get("output_tokens") or 0)


def new_id(prefix: str) -> str:
    return f"{prefix}{time.time_ns():x}"


def messages_reply_to_chat(reply: dict[str, Any]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in reply.get("content") or []:
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input", {}))}})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    prompt, completion = usage_of("messages", reply)
    return {"id": reply.get("id") or new_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()),
            "model": reply.get("model"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": ANTHROPIC_STOP.get(str(reply.get("stop_reason")), "stop")}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def _tool_input(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return {"arguments": arguments}  # the model wrote arguments that are not JSON: kept, not lost


def chat_reply_to_messages(reply: dict[str, Any]) -> dict[str, Any]:
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": str(message["content"])})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
                        "input": _tool_input(function.get("arguments"))})
    prompt, completion = usage_of("chat", reply)
    return {"id": new_id("msg_"), "type": "message", "role": "assistant", "model": reply.get("model"),
            "content": content, "stop_reason": CHAT_STOP.get(str(choice.get("finish_reason")), "end_turn"),
            "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": completion}}


def response_object(model: Any, output: list[dict[str, Any]], status: str, usage: tuple[int, int] | None,
                    response_id: str, created: int) -> dict[str, Any]:
    """A Responses API `response` object (also the payload of the stream's created/completed events)."""
    return {"id": response_id, "object": "response", "created_at": created, "status": status, "model": model,
            "output": output, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": None, "metadata": {}, "parallel_tool_calls": True, "temperature": None,
            "top_p": None, "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}},
            "usage": None if usage is None else {
                "input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": usage[0] + usage[1],
                "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def chat_reply_to_responses(reply: dict[str, Any]) -> dict[str, Any]:
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(message_item(new_id("msg_"), str(message["content"])))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(call_item(new_id("fc_"), str(call.get("id")), str(function.get("name")),
                                str(function.get("arguments") or "")))
    status = "incomplete" if choice.get("finish_reason") == "length" else "completed"
    return response_object(reply.get("model"), output, status, usage_of("chat", reply), new_id("resp_"),
                           int(time.time()))
