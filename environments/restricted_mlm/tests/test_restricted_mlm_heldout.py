"""Restricted MLM's held-out final split on `tiny` (`final_split`, docs/heldout.md): the build writes
it as one more stream of the source beside an unchanged heldout.bin, and the scorer reads the file
its `split` param names, through the harness's helper in a real local sandbox."""

from __future__ import annotations

import pytest

from rebench.kit import corpus

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_the_final_split_is_another_stream_and_the_intermediate_one_is_unchanged(installed) -> None:
    """heldout.bin is the bytes it was before final.bin existed (stream 23: the intermediate anchors
    were measured on it); final.bin is stream 24 of the same source, as long."""
    mlm = installed("restricted_mlm")
    params = mlm.env.profile("tiny").params
    spec = corpus.InteractionSourceSpec()
    intermediate = (mlm.protected / "heldout.bin").read_bytes()
    final = (mlm.protected / "final.bin").read_bytes()
    assert intermediate == corpus.generate(spec, params["heldout_tokens"], stream_seed=23).astype("<u2").tobytes()
    assert final == corpus.generate(spec, params["final_tokens"], stream_seed=24).astype("<u2").tobytes()
    assert final != intermediate and len(final) == len(intermediate)


def test_the_scorer_reads_the_held_out_file_its_split_param_names(installed) -> None:
    """The starting solution scores differently on the two files, each at its split's start anchor;
    a split of another name, or a final split whose file is missing, is an invalid score, never the
    visible data the scorer falls back to when run by hand."""
    mlm = installed("restricted_mlm")
    mlm.check_final_split("heldout.bin", "validation", max_se=0.1)
