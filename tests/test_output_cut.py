"""The one head/tail cut (rebench.sandbox.output): on text and bytes, streamed in chunks,
and the exec server's own copy of the rule (it cannot import rebench) giving the same cut."""

from __future__ import annotations

import base64
import random

import pytest

from rebench.sandbox import exec_server
from rebench.sandbox.channel import decode_capture
from rebench.sandbox.output import TRUNCATION_MARKER, OutputCapture, cap_output, head_and_tail


def test_head_and_tail_keeps_the_halves_of_the_limit_and_counts_the_rest() -> None:
    assert head_and_tail("abcdefghij", 4) == ("ab", "ij", 6)
    assert head_and_tail(b"abcdefghij", 5) == (b"ab", b"ij", 6)
    assert head_and_tail("abcd", 4) == ("abcd", "", 0)
    assert cap_output(b"0123456789", 4) == ("01" + TRUNCATION_MARKER.format(dropped=6) + "89", True)
    assert cap_output(b"0123", 4) == ("0123", False)


@pytest.mark.parametrize("size", [0, 7, 16, 17, 63, 64, 65, 200, 1000])
def test_streamed_in_chunks_the_cut_is_the_cut_of_the_whole(size: int) -> None:
    """The local backend's capture (bounded memory, compacting past 4x the limit) and the
    exec server's capture both give what cutting the whole stream at once gives."""
    limit = 16
    rng = random.Random(size)
    data = bytes(rng.randrange(32, 127) for _ in range(size))
    local, server = OutputCapture(limit), exec_server.Capture(limit)
    rest = data
    while rest:
        step = rng.randrange(1, 40)
        local.add(rest[:step])
        server.add(rest[:step])
        rest = rest[step:]
    whole = cap_output(data, limit)
    assert local.text() == whole
    assert decode_capture(server.result()) == whole
    head, tail, dropped = head_and_tail(data, limit)
    reply = server.result()
    assert (base64.b64decode(reply["head"]), base64.b64decode(reply["tail"]), reply["dropped"]) == (
        head, tail, dropped)
