"""Activation Sparsity's held-out final split on `tiny` (`final_split`, docs/heldout.md): the build
writes it as one more stream of the source beside an unchanged heldout.bin, and the scorer reads
the text its `split` param names, through the harness's helper in a real local sandbox."""

from __future__ import annotations

import asyncio
import json

import pytest

from rebench.environments.install import FINAL_PARAMS_FILE, PARAMS_FILE
from rebench.kit import corpus
from rebench.scoring.normalize import normalize
from rebench.scoring.run import run_scoring

pytestmark = [pytest.mark.slow, pytest.mark.torch]


def _scored(env, params: str) -> dict:
    """One score call of the solution in place with the protected params file `params`."""
    timeout = env.env.profile(env.profile).score_timeout_s
    return asyncio.run(run_scoring(env.sandbox, timeout, params=params)).model_dump()


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
    split = profile.final_split
    assert split is not None and split.params == {"split": "final"}
    intermediate, final = _scored(env, PARAMS_FILE), _scored(env, FINAL_PARAMS_FILE)
    assert intermediate["details"]["data"] == "heldout.bin" and intermediate["details"]["split"] == "intermediate"
    assert final["details"]["data"] == "final.bin" and final["details"]["split"] == "final"
    assert intermediate["raw"] is not None and final["raw"] is not None and intermediate["raw"] != final["raw"]
    # each at its split's start anchor, normalized with that split's anchors (a build's trained
    # weights depend a little on the machine's floating-point kernels, so not to the last digit)
    assert abs(normalize(intermediate["raw"], profile.anchors.start, profile.anchors.reference, clip=False)) < 0.01
    assert abs(normalize(final["raw"], split.anchors.start, split.anchors.reference, clip=False)) < 0.01
    assert 0 < final["details"]["raw_se"] < 0.2  # the sampling error the README's margin is made of
    # top-k: the same sparsity on any text
    assert min(final["details"]["sparsity"].values()) >= profile.params["target_sparsity"] - 0.005

    params = json.loads((env.protected / PARAMS_FILE).read_text())
    (env.protected / "params-other.json").write_text(json.dumps({**params, "split": "calibration"}))
    other = _scored(env, "params-other.json")
    assert other["raw"] is None and "unknown split 'calibration'" in other["message"]["error"], other

    (env.protected / "final.bin").unlink()
    missing = _scored(env, FINAL_PARAMS_FILE)
    assert missing["raw"] is None and "final.bin is missing or not readable" in missing["message"]["error"], missing
