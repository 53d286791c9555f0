"""The structural rules each API the fake model server speaks enforces on a request, so that a
malformed conversation fails here as it would against the provider."""

from __future__ import annotations

from typing import Any


def check_openai(body: dict[str, Any]) -> str | None:
    """The structural rules Chat Completions enforces on a conversation."""
    if not body.get("model"):
        return "model is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    pending: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return f"messages[{i}]: tool message answers unknown tool_call_id {call_id!r}"
            pending.discard(call_id)
            continue
        if pending:
            return f"messages[{i}]: tool calls {sorted(pending)} were not answered"
        if role == "assistant":
            pending = {call["id"] for call in message.get("tool_calls") or []}
        elif role not in ("system", "user", "developer"):
            return f"messages[{i}]: unknown role {role!r}"
    if pending:
        return f"tool calls {sorted(pending)} were not answered"
    return None


def check_anthropic(body: dict[str, Any]) -> str | None:
    """The structural rules the Messages API enforces on a conversation."""
    if not body.get("model"):
        return "model is required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    expected = "user"
    pending: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") == "system" and i > 0:
            continue  # a system message between turns (Claude Code 2.1 sends its environment notes so)
        if message.get("role") != expected:
            return f"messages[{i}]: roles must alternate starting with user"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not blocks:
            return f"messages[{i}]: content must not be empty"
        if expected == "user":
            answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
            if answered != pending:
                got = sorted(map(str, answered))
                return f"messages[{i}]: tool_result blocks {got} do not match tool_use {sorted(pending)}"
            pending = set()
        else:
            pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        expected = "assistant" if expected == "user" else "user"
    if pending:
        return "last assistant turn has unanswered tool_use blocks"
    return None


def check_responses(body: dict[str, Any]) -> str | None:
    """The structural rules the Responses API enforces: a model, and input as text or a list of items."""
    if not body.get("model"):
        return "model is required"
    given = body.get("input")
    if not isinstance(given, str | list) or not given:
        return "input must be a string or a non-empty list of items"
    calls: set[str] = set()
    for i, item in enumerate(given if isinstance(given, list) else []):
        if item.get("type") == "function_call":
            calls.add(item.get("call_id"))
        elif item.get("type") == "function_call_output" and item.get("call_id") not in calls:
            return f"input[{i}]: function_call_output answers unknown call_id {item.get('call_id')!r}"
    return None
