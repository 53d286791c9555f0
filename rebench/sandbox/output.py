"""One rule for cutting a long output to its head and its tail.

A command's streams (each capped at `OUTPUT_LIMIT_BYTES`, the cut marked with
`TRUNCATION_MARKER`) and the modular agent's tool results (cut to the characters a
model is shown) both keep the first and the last half of their limit and say how much
was dropped between: `head_and_tail` is that rule. The exec server inside Docker
containers applies the same rule with its own copy (`exec_server.Capture`), because
it is sent whole into the container and can import nothing of rebench;
tests/test_output_cut.py checks that the two agree.
"""

from __future__ import annotations

from typing import TypeVar

OUTPUT_LIMIT_BYTES = 1_000_000
TRUNCATION_MARKER = "\n[... output truncated by rebench: {dropped} bytes dropped ...]\n"

Seq = TypeVar("Seq", str, bytes)


def head_and_tail(data: Seq, limit: int) -> tuple[Seq, Seq, int]:
    """The first and the last `limit // 2` items of `data`, and how many were dropped
    between them; `data` whole (an empty tail, 0 dropped) when it fits in `limit`."""
    if len(data) <= limit:
        return data, data[:0], 0
    half = limit // 2
    return data[:half], data[len(data) - half :], len(data) - 2 * half


def join_cut(head: bytes, tail: bytes, dropped: int) -> tuple[str, bool]:
    """Decoded text of a cut stream, the marker between head and tail; and whether it was cut."""
    text = head.decode("utf-8", errors="replace")
    if not tail and not dropped:
        return text, False
    return text + TRUNCATION_MARKER.format(dropped=dropped) + tail.decode("utf-8", errors="replace"), True


def cap_output(data: bytes, limit: int = OUTPUT_LIMIT_BYTES) -> tuple[str, bool]:
    """Decode output, keeping head and tail with a clear marker when it is too long."""
    return join_cut(*head_and_tail(data, limit))


class OutputCapture:
    """A stream read as it arrives, in bounded memory: everything up to 4x the limit, then
    only the head and a sliding tail, counting what was dropped (a command printing
    gigabytes must not fill memory). `text()` equals `cap_output` of the whole stream."""

    def __init__(self, limit: int = OUTPUT_LIMIT_BYTES) -> None:
        self.limit = limit
        self._data = bytearray()
        self._dropped = 0

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 4 * self.limit:
            half = self.limit // 2
            cut = len(self._data) - half - self.limit  # keep the head and the last `limit` bytes
            del self._data[half : half + cut]
            self._dropped += cut

    def text(self) -> tuple[str, bool]:
        head, tail, dropped = head_and_tail(bytes(self._data), self.limit)
        return join_cut(head, tail, dropped + self._dropped)
