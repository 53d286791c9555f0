"""Keeping the conversation inside the model's context window.

As in Modular, the oldest tool outputs give way first: their text is replaced
by a short notice, so tool calls and results still pair up (both APIs insist)
and the model knows something was there. Messages are frozen: a trimmed one is
replaced in the list by a copy with the notice.

The estimate runs before every call, so each message's size is measured once for
the attempt (`ConversationSize`), not on every call.
"""

from __future__ import annotations

import json

from rebench.models import Message, ToolSpec
from rebench.models.message_memo import MessageMemo

TRIMMED_NOTICE = "[output removed to keep the conversation inside the context window]"


def message_chars(message: Message) -> int:
    return len(message.content) + 16 + sum(len(json.dumps(call.arguments)) + len(call.name)
                                           for call in message.tool_calls)


def _tokens(chars: int, chars_per_token: float) -> int:
    return int(chars / chars_per_token) + 1


class ConversationSize:
    """The characters of each message of one conversation, remembered between calls."""

    def __init__(self) -> None:
        self._chars: MessageMemo[int] = MessageMemo(lambda _before, message: message_chars(message))
        self._tools: tuple[list[ToolSpec], int] | None = None

    def chars(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> int:
        if self._tools is None or self._tools[0] != tools:
            self._tools = (list(tools), sum(len(json.dumps(t.parameters)) + len(t.description) for t in tools))
        return len(system) + self._tools[1] + sum(self._chars.values(messages))

    def tokens(self, system: str, messages: list[Message], tools: list[ToolSpec], chars_per_token: float) -> int:
        return _tokens(self.chars(system, messages, tools), chars_per_token)


def estimate_tokens(system: str, messages: list[Message], tools: list[ToolSpec], chars_per_token: float) -> int:
    return ConversationSize().tokens(system, messages, tools, chars_per_token)


def trim_oldest(
    system: str, messages: list[Message], tools: list[ToolSpec], *, budget_tokens: int, chars_per_token: float,
    size: ConversationSize | None = None,
) -> int:
    """Replace the oldest tool outputs (then old user notes) until the estimate fits.

    The first message (the task) and the newest turn are never touched.
    Returns how many messages were trimmed."""
    total = (size or ConversationSize()).chars(system, messages, tools)
    trimmed = 0
    last_assistant = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), 0)
    for roles in (("tool",), ("user", "assistant")):
        for index in range(1, last_assistant):
            if _tokens(total, chars_per_token) <= budget_tokens:
                return trimmed
            message = messages[index]
            if message.role in roles and message.content not in ("", TRIMMED_NOTICE):
                messages[index] = message.model_copy(update={"content": TRIMMED_NOTICE})
                total += len(TRIMMED_NOTICE) - len(message.content)
                trimmed += 1
    return trimmed
