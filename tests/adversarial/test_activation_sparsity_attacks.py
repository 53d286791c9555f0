"""Activation Sparsity: attacks on the plan sparsify.py returns and on what the scorer reads and
imports (issue 50, item 3), on the tiny profile's build (cached by content hash) installed in a local
sandbox. Every one was already held:

1. plans with values at the edges of float32 (a transform of 1e39 or 1e-39 whose condition number
   is 1, thresholds of -0.0 or a subnormal), scored by the real scorer: invalid or honestly worse,
   never a NaN or a gain; a reply header forged on the child's pipe (a count of 1e999 bytes) is an
   invalid score through the helper;
2. the sparsity tolerance: a layer at 0.3984 (77 kept of 128) passes the 0.395 floor, one at
   0.3906 (78 kept) does not;
3. reading the scorer's files and measurements (held-out and final text, params, score log, its
   source, its /proc entries, its objects): denied confined; unconfined the files read;
4. modules planted under the names the scorer imports in the solution and home folders, and torch's
   comparison and reduction functions patched inside the child so that a plan with no zeros would
   look sparse: nothing reaches the scorer, which counts the zeros itself.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from rebench.kit.buildutil import load_file
from rebench.scoring.score_helper import confine_command
from tests.adversarial.new_env_attacks import (
    ENV_FIXTURES,
    REPO,
    install,
    plant_modules,
    probe_report,
    probe_source,
    unconfined_params,
)

pytest.importorskip("torch")
pytestmark = [pytest.mark.adversarial, pytest.mark.torch, pytest.mark.slow]

installed = ENV_FIXTURES.installed
ENV = REPO / "environments" / "activation_sparsity"

PLAN = '''
import sparse_gpt
import torch


def make_plan(model, calibration, target):
    """Per-token top-k of the starting solution, with the entries of EDITS laid over it."""
    plan = {{}}
    for site in sparse_gpt.sites(model.config.n_layer):
        d = sparse_gpt.module_at(model, site).in_features
        plan[site] = {{"transform": torch.eye(d), "keep": torch.tensor([int((1 - target) * d)])}}
    d = 128
    edits = {edits}
    for site, entry in edits.items():
        plan[site] = entry
    return plan
'''
EYE64 = "torch.eye(d, dtype=torch.float64)"
EDGE_PLANS = {
    "a transform of 1e39 (inf in float32)":
        '{"h.0.attn.c_attn": {"transform": ' + EYE64 + ' * 1e39, "keep": torch.tensor([76])}}',
    "a transform of 1e-39 (subnormal in float32)":
        '{"h.0.attn.c_attn": {"transform": ' + EYE64 + ' * 1e-39, "keep": torch.tensor([76])}}',
    "thresholds of -0.0": '{"h.1.mlp.c_fc": {"transform": torch.eye(d), "threshold": torch.full((d,), -0.0)}}',
    "subnormal thresholds": '{"h.1.mlp.c_fc": {"transform": torch.eye(d), "threshold": torch.full((d,), 1e-45)}}',
}
FORGED_HEADER = '''
import os
import sys

os.write(int(sys.argv[2]), b'{"tensors": [], "nbytes": 1e999}\\n')
os._exit(0)
'''
PATCHING = '''
import torch

# Were the scorer's interpreter this one, every input would count as all zeros.
torch.Tensor.__eq__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)
torch.Tensor.sum = lambda self, *a, **k: torch.tensor(self.numel())
torch.where = lambda cond, a, b: torch.zeros_like(a)
torch.isfinite = lambda x: torch.ones(x.shape, dtype=torch.bool)
torch.allclose = torch.isclose = lambda *a, **k: True
'''
SCORER_IMPORTS = ["numpy", "torch", "json", "math", "copy", "sparse_gpt", "activation_sparsity_sparse_gpt",
                  "plan_worker", "score", "rebench.kit.gpt", "rebench.kit.confined", "sitecustomize", "usercustomize"]


def _plan(edits: str) -> str:
    return PLAN.format(edits=edits)


def _score_here(env: Any) -> dict[str, Any]:
    """The environment's score(ctx) called in this process with the protected params and the
    helper's confinement: the scorer's own exception, if any, reaches the test."""
    scorer = load_file("activation_sparsity_score_under_attack", ENV / "scoring" / "score.py")
    ctx = json.loads((env.protected / "params.json").read_text())
    ctx["confine_command"] = confine_command(str(env.protected))
    result: dict[str, Any] = scorer.score(ctx)
    return result


def test_plans_at_the_edges_of_float32_are_invalid_or_honestly_worse(installed) -> None:
    env = install(installed, "activation_sparsity")
    start = _score_here(env)
    assert start["raw"] is not None, start
    found = {}
    for name, edits in EDGE_PLANS.items():
        (env.solution / "sparsify.py").write_text(_plan(edits))
        found[name] = _score_here(env)
    for name, result in found.items():
        raw = result["raw"]
        assert raw is None or (math.isfinite(raw) and raw >= start["raw"]), (name, result)
        if raw is None:
            assert result["message"]["error"], (name, result)  # with its reason
    assert found["thresholds of -0.0"]["raw"] is None, found["thresholds of -0.0"]  # keeps everything: no zeros


def test_a_forged_reply_header_is_an_invalid_score(installed) -> None:
    env = install(installed, "activation_sparsity")
    (env.solution / "sparsify.py").write_text(FORGED_HEADER)
    result = env.score()
    assert result["raw"] is None and "OverflowError" in result["message"]["error"], result
    json.dumps(result, allow_nan=False)


def test_the_sparsity_floor_is_exact_at_the_tolerance(installed) -> None:
    """77 of 128 kept is 0.3984, inside the 0.005 tolerance of 0.4; 78 is 0.3906, outside."""
    env = install(installed, "activation_sparsity")
    (env.solution / "sparsify.py").write_text(_plan('{"h.0.attn.c_attn": {"transform": torch.eye(d), '
                                                    '"keep": torch.tensor([77])}}'))
    inside = env.score()
    (env.solution / "sparsify.py").write_text(_plan('{"h.0.attn.c_attn": {"transform": torch.eye(d), '
                                                    '"keep": torch.tensor([78])}}'))
    outside = env.score()
    assert inside["raw"] is not None and inside["details"]["sparsity"]["h.0.attn.c_attn"] == 51 / 128, inside
    assert outside["raw"] is None and "h.0.attn.c_attn is 0.3906, below the target" in outside["message"]["error"]


def test_sparsify_cannot_read_the_scorers_files_or_measurements(installed) -> None:
    from rebench.scoring.score_helper import confinement_unavailable

    if (why := confinement_unavailable()) is not None:
        pytest.skip(f"this kernel cannot confine scoring children: {why}")
    env = install(installed, "activation_sparsity")
    files = ["heldout.bin", "final.bin", "params.json", "params-final.json", "score.log"]
    source = probe_source(env.protected, files) + "\n\ndef make_plan(model, calibration, target):\n" \
                                                  "    raise RuntimeError(probe())\n"
    (env.solution / "sparsify.py").write_text(source)
    confined = probe_report(env.score())
    unconfined = probe_report(env.score(unconfined_params(env.protected)))  # the score log exists by now
    assert all(unconfined[name] == "READ" for name in files), unconfined  # the probe works where it may
    closed = {name: word for name, word in confined.items() if word not in ("denied", "absent", "empty")}
    if os.geteuid() == 0:  # root reads any process's environment and descriptor list (test_high_norm_attacks.py)
        closed = {name: word for name, word in closed.items() if name not in ("environ", "fds")}
    assert closed == {}, confined


def test_planted_modules_and_patched_functions_do_not_reach_the_scorer(installed, tmp_path: Path) -> None:
    """A plan that keeps every entry, with the child's torch patched so that everything compares
    equal to zero: the scorer counts no zeros and refuses it."""
    env = install(installed, "activation_sparsity")
    markers = tmp_path / "markers"
    markers.mkdir()
    plant_modules([env.solution, env.home], markers, SCORER_IMPORTS)
    keep_all = _plan("{site: {\"transform\": torch.eye(sparse_gpt.module_at(model, site).in_features), "
                     "\"keep\": torch.tensor([512])} for site in sparse_gpt.sites(model.config.n_layer)}")
    (env.solution / "sparsify.py").write_text(PATCHING + keep_all)
    result = env.score()
    assert sorted(p.name for p in markers.iterdir()) == [], [p.read_text() for p in markers.iterdir()]
    assert result["raw"] is None and "below the target" in result["message"]["error"], result
    assert result["details"]["sparsity"]["h.0.attn.c_attn"] == 0.0, result
