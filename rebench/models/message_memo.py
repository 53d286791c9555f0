"""Work done once per message of a growing conversation, not once per call.

An agent resends its whole conversation on every model call; translating, serializing or
measuring every message again each time makes a call's cost grow with the attempt (and
it runs on the event loop every attempt shares). A `MessageMemo` keeps what it computed
for each message of the last call's list and computes only for the positions whose
message object changed: the new ones at the end, or an old one the agent replaced (a
trimmed tool output). Messages are frozen values (rebench.models.messages), so the same
object always means the same content; finding the changed positions is a pointer
comparison per message, done in C.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from operator import is_
from typing import Any, Generic, TypeVar

from rebench.models.messages import Message

T = TypeVar("T")


def json_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON, as the SDKs send it."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class MessageMemo(Generic[T]):
    """`values(messages)`: `compute(previous, message)` for each message, reusing the last call's.

    `compute` may look at the message before (None for the first): a value is recomputed when
    its message or the one before it changed. `changed` is the positions computed by the last
    call (new or replaced messages), in order."""

    def __init__(self, compute: Callable[[Message | None, Message], T]) -> None:
        self._compute = compute
        self._messages: list[Message] = []
        self._values: list[T] = []
        self.changed: list[int] = []

    def values(self, messages: Sequence[Message]) -> list[T]:
        old = self._messages
        shared = min(len(old), len(messages))
        values = self._values[:shared]
        same = list(map(is_, old[:shared], messages[:shared]))
        changed: list[int] = []
        if not all(same):
            stale = {i for i, kept in enumerate(same) if not kept}
            stale |= {i + 1 for i in stale if i + 1 < shared}
            changed = sorted(stale)
            for i in changed:
                values[i] = self._compute(messages[i - 1] if i else None, messages[i])
        for i in range(shared, len(messages)):
            values.append(self._compute(messages[i - 1] if i else None, messages[i]))
            changed.append(i)
        self._messages, self._values, self.changed = list(messages), values, changed
        return values
