"""Activation Sparsity's held-out final split on `tiny` (`final_split`, docs/heldout.md): the build
writes it as one more stream of the source beside an unchanged heldout.bin, and the scorer reads
the text its `split` param names, through the harness's helper in a real local sandbox."""

from __future__ import annotations

import pytest

from rebench.kit import corpus

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_the_final_split_is_another_stream_and_the_intermediate_one_is_unchanged(installed) -> None:
    """heldout.bin is the bytes it was before final.bin existed (stream 22: the intermediate anchors
    were measured on it); final.bin is stream 23 of the same source, as long."""
    env = installed("activation_sparsity")
    params = env.env.profile("tiny").params
    spec = corpus.SourceSpec(**params.get("source", {}))
    intermediate = (env.protected / "heldout.bin").read_bytes()
    final = (env.protected / "final.bin").read_bytes()
    assert intermediate == corpus.generate(spec, params["heldout_tokens"], stream_seed=22).astype("<u2").tobytes()
    assert final == corpus.generate(spec, params["final_tokens"], stream_seed=23).astype("<u2").tobytes()
    assert final != intermediate and len(final) == len(intermediate)


def test_the_scorer_reads_the_held_out_text_its_split_param_names(installed) -> None:
    """The starting solution scores differently on the two texts, each at its split's start anchor;
    a split of another name, or a final split whose file is missing, is an invalid score, never the
    calibration text the scorer falls back to when run by hand."""
    env = installed("activation_sparsity")
    profile = env.env.profile("tiny")
    final = env.check_final_split("heldout.bin", "calibration", max_se=0.2)
    # top-k: the same sparsity on any text
    assert min(final["details"]["sparsity"].values()) >= profile.params["target_sparsity"] - 0.005
