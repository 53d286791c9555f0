"""Keeping the conversation inside the model's context window.

As in Modular, the oldest tool outputs give way first: their text is replaced
by a short notice, so tool calls and results still pair up (both APIs insist)
and the model knows something was there.
"""

from __future__ import annotations

import json

from rebench.models import Message, ToolSpec

TRIMMED_NOTICE = "[output removed to keep the conversation inside the context window]"


def estimate_tokens(system: str, messages: list[Message], tools: list[ToolSpec], chars_per_token: float) -> int:
    chars = len(system) + sum(len(json.dumps(t.parameters)) + len(t.description) for t in tools)
    for message in messages:
        chars += len(message.content) + 16
        chars += sum(len(json.dumps(call.arguments)) + len(call.name) for call in message.tool_calls)
    return int(chars / chars_per_token) + 1


def trim_oldest(
    system: str, messages: list[Message], tools: list[ToolSpec], *, budget_tokens: int, chars_per_token: float
) -> int:
    """Replace the oldest tool outputs (then old user notes) until the estimate fits.

    The first message (the task) and the newest turn are never touched.
    Returns how many messages were trimmed."""
    trimmed = 0
    last_assistant = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=0)
    for roles in (("tool",), ("user", "assistant")):
        for index in range(1, last_assistant):
            if estimate_tokens(system, messages, tools, chars_per_token) <= budget_tokens:
                return trimmed
            message = messages[index]
            if message.role in roles and message.content not in ("", TRIMMED_NOTICE):
                message.content = TRIMMED_NOTICE
                trimmed += 1
    return trimmed
