"""Fix Embedding's held-out final split on `tiny` (`final_split`, docs/heldout.md): the build writes
it as one more stream of the language beside an unchanged val.bin, and the scorer reads the file
its `split` param names, through the harness's helper in a real local sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebench.kit.buildutil import load_file

ENV = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def test_the_final_split_is_another_stream_and_the_intermediate_one_is_unchanged(installed) -> None:
    """val.bin is the bytes it was before final.bin existed (stream 12: the intermediate anchors were
    measured on it); final.bin is stream 13 of the same language, as long."""
    fix = installed("fix_embedding")
    params = fix.env.profile("tiny").params
    language = load_file("fix_embedding_language", ENV / "language.py")
    spec = language.LanguageSpec(**params["language"])
    intermediate = (fix.protected / "val.bin").read_bytes()
    final = (fix.protected / "final.bin").read_bytes()
    assert intermediate == language.generate(spec, params["heldout_tokens"], stream_seed=12).astype("<u2").tobytes()
    assert final == language.generate(spec, params["final_tokens"], stream_seed=13).astype("<u2").tobytes()
    assert final != intermediate and len(final) == len(intermediate)


def test_the_scorer_reads_the_held_out_file_its_split_param_names(installed) -> None:
    """The starting solution (the scrambled model) scores differently on the two files, each at its
    split's start anchor; a split of another name, or a final split whose file is missing, is an
    invalid score."""
    fix = installed("fix_embedding")
    fix.check_final_split("val.bin", "train", max_se=0.1)
