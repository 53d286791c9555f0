"""High-Norm Tokens: attacks on what predict.py returns and on what the scorer reads and imports
(issue 50, item 3). Each runs the real scorer through the harness's helper in a local sandbox with
the tiny profile's build (cached by content hash), as an attempt's score call does:

1. a direction scaled so that its entries' squares fall into float64's subnormal range: the norm
   the scorer divided by came out too small, the "unit" vector too long, |cos| up to 1.56 and the
   raw score above its maximum of 1 (fixed: the vector is scaled to a largest entry of 1 first,
   and |cos| is capped at 1);
2. replies forged on the child's pipe (the agent's code owns the child's whole interpreter):
   NaN, Infinity, a 400-digit integer, a float or boolean layer, a scalar direction, a count of
   1e999 bytes: each an invalid score with the scorer's own reason, never a crash or a NaN;
3. reading the scorer's files and measurements (protected files, its params, score log and
   source, its /proc entries, its objects): denied confined; unconfined the files read;
4. modules planted under the names the scorer imports (numpy, torch, measure, the kit, site
   hooks, a .pth) in the solution and home folders, and torch, math and time patched inside the
   child: nothing of them reaches the scorer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from rebench.kit.buildutil import load_file
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
ENV = REPO / "environments" / "high_norm_tokens"

SUBNORMAL_SQUARES = (ENV / "reference" / "predict.py").read_text().replace("def predict(", "def honest(") + '''

import math


def predict(blocks, config):
    """The reference's prediction, its unit direction scaled down until its norm, as float64
    computes it from the squares of the entries, is furthest below its length."""
    out = honest(blocks, config)
    unit = torch.tensor(out["direction"], dtype=torch.float64)
    unit = unit / unit.norm()
    best, scale = 1.0, 1.0
    for step in range(1, 400):
        s = math.sqrt(step * 0.01 * 5e-324) / float(unit.abs().max())
        shrunk = unit * s
        if float(shrunk.norm()) > 0 and float((shrunk / shrunk.norm()).norm()) > best:
            best, scale = float((shrunk / shrunk.norm()).norm()), s
    out["direction"] = (unit * scale).tolist()
    return out
'''

FORGED = '''
import os
import sys


def predict(blocks, config):
    """Write the scorer a reply of this file's choosing on the child's own pipe, and leave."""
    os.write(int(sys.argv[2]), {line!r}.encode() + b"\\n")
    os._exit(0)
'''

FORGERIES = {
    "Infinity": ('{"explode_layer": 1, "decay_layer": 2, "direction": [Infinity' + ", 1.0" * 63 + "]}",
                 "direction must be 64 finite numbers"),
    "a 400-digit integer": ('{"explode_layer": 1, "decay_layer": 2, "direction": [' + "9" * 400 + ", 1.0" * 63 + "]}",
                            "direction must be 64 finite numbers"),
    "a float layer": ('{"explode_layer": 1.0, "decay_layer": 2, "direction": [1.0]}', "explode_layer is 1.0"),
    "a count of 1e999 bytes": ('{"nbytes": 1e999}', "invalid prediction"),
}
"""Replies written on the pipe, each with the reason the scorer must give (through the helper)."""
CHECKED = [
    ({"direction": [float("nan")] + [1.0] * 63}, "direction must be 64 finite numbers"),
    ({"direction": [float("-inf")] + [1.0] * 63}, "direction must be 64 finite numbers"),
    ({"direction": [10 ** 400] + [1.0] * 63}, "direction must be 64 finite numbers"),
    ({"direction": [True] * 64}, "direction must be 64 finite numbers"),
    ({"direction": ["1.0"] * 64}, "direction must be 64 finite numbers"),
    ({"direction": [[1.0]] * 64}, "direction must be 64 finite numbers"),
    ({"direction": 1.0}, "direction must be 64 finite numbers"),
    ({"direction": [1.0] * 63}, "direction must be 64 finite numbers"),
    ({"direction": [-0.0] * 64}, "must not be the zero vector"),
    ({"explode_layer": True}, "explode_layer is True"),
    ({"explode_layer": 0}, "explode_layer is 0"),
    ({"decay_layer": 10 ** 400}, "decay_layer is 1000"),
    ({"decay_layer": float("nan")}, "decay_layer is nan"),
]
"""Values the child may send (its JSON may hold NaN, Infinity and integers of any size), checked
by the scorer's own check_prediction: each refused with a ValueError naming it."""

PATCHING = '''
import builtins
import math
import time

import torch

# Everything the scorer's checks use, patched at import: were the scorer's interpreter this one,
# any direction would score |cos| 1 and any timing would read 0.
torch.Tensor.__matmul__ = lambda self, other: torch.tensor(1.0, dtype=torch.float64)
torch.Tensor.norm = lambda self, *a, **k: torch.tensor(1.0, dtype=torch.float64)
torch.allclose = torch.isclose = lambda *a, **k: True
math.isfinite = lambda x: True
builtins.abs = lambda x: 1.0
builtins.min = lambda *a, **k: 1.0
time.perf_counter = time.monotonic = lambda: 0.0
'''
SCORER_IMPORTS = ["numpy", "torch", "json", "math", "measure", "high_norm_tokens_measure", "score",
                  "rebench.kit.gpt", "sitecustomize", "usercustomize"]
"""Names the scorer (and the helper that runs it) imports or would pick up from its path."""


def _start(solution: Path) -> None:
    shutil.copyfile(ENV / "workspace" / "predict.py", solution / "predict.py")


def test_a_direction_scaled_into_subnormal_squares_scores_no_more_than_the_direction(installed) -> None:
    """Before the fix: raw 1.278 (|cos| 1.555) against the reference's 0.999, the maximum being 1."""
    env = install(installed, "high_norm_tokens")
    shutil.copyfile(ENV / "reference" / "predict.py", env.solution / "predict.py")
    reference = env.score()
    (env.solution / "predict.py").write_text(SUBNORMAL_SQUARES)
    scaled = env.score()
    assert reference["raw"] is not None and scaled["raw"] is not None, (reference, scaled)
    assert scaled["details"]["direction"] <= 1.0, scaled
    assert scaled["raw"] == pytest.approx(reference["raw"], abs=1e-6), (scaled, reference)


def test_forged_replies_are_invalid_with_the_scorers_reason(installed) -> None:
    """Written straight to the scorer's pipe; before the fix the integer and the count crashed the
    scorer (the helper's catch-all reported the OverflowError)."""
    env = install(installed, "high_norm_tokens")
    wrong = {}
    for name, (line, reason) in FORGERIES.items():
        (env.solution / "predict.py").write_text(FORGED.format(line=line))
        result = env.score()
        json.dumps(result, allow_nan=False)  # nothing non-finite was recorded
        error = str(result["message"].get("error", ""))
        if result["raw"] is not None or reason not in error or "Error:" in error:
            wrong[name] = result
    assert wrong == {}, wrong


@pytest.mark.parametrize(("change", "reason"), CHECKED)
def test_malformed_values_are_refused_by_the_scorers_check(change: dict, reason: str) -> None:
    scorer = load_file("high_norm_tokens_score_under_attack", ENV / "scoring" / "score.py")
    reply = {"explode_layer": 3, "decay_layer": 7, "direction": [1.0] * 64, **change}
    with pytest.raises(ValueError, match=re.escape(reason)):
        scorer.check_prediction(reply, 8, 64)


def test_a_huge_or_subnormal_direction_is_the_direction_it_names() -> None:
    """Scaling a direction by 1e300 or 1e-300 changes nothing (before, 1e300 overflowed the norm to
    infinity and scored |cos| 0)."""
    import torch

    scorer = load_file("high_norm_tokens_score_under_attack", ENV / "scoring" / "score.py")
    unit = torch.randn(64, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    unit = unit / unit.norm()
    for scale in (1e300, 1e-300, 1e-160, 1.0):
        _, _, vector = scorer.check_prediction({"explode_layer": 3, "decay_layer": 7,
                                                "direction": (unit * scale).tolist()}, 8, 64)
        assert float(vector @ unit) == pytest.approx(1.0, abs=1e-12), scale


def test_predict_cannot_read_the_scorers_files_or_measurements(installed) -> None:
    from rebench.scoring.score_helper import confinement_unavailable

    if (why := confinement_unavailable()) is not None:
        pytest.skip(f"this kernel cannot confine scoring children: {why}")
    env = install(installed, "high_norm_tokens")
    files = ["model.pth", "heldout.bin", "build_report.json", "params.json", "score.log"]
    source = probe_source(env.protected, files) + "\n\ndef predict(blocks, config):\n    raise RuntimeError(probe())\n"
    (env.solution / "predict.py").write_text(source)
    confined = probe_report(env.score())
    unconfined = probe_report(env.score(unconfined_params(env.protected)))  # the score log exists by now
    assert all(unconfined[name] == "READ" for name in files), unconfined  # the probe works where it may
    closed = {name: word for name, word in confined.items() if word not in ("denied", "absent", "empty")}
    # As root (the local backend run by root) the scorer's environment and descriptor list are
    # readable whatever its dumpability; they hold no secret (the nonce and the call's token come on
    # stdin). On Docker the scorer is another user's non-dumpable process.
    if os.geteuid() == 0:
        closed = {name: word for name, word in closed.items() if name not in ("environ", "fds")}
    assert closed == {}, confined


def test_planted_modules_and_patched_functions_do_not_reach_the_scorer(installed, tmp_path: Path) -> None:
    env = install(installed, "high_norm_tokens")
    _start(env.solution)
    start = env.score()
    markers = tmp_path / "markers"
    markers.mkdir()
    plant_modules([env.solution, env.home], markers, SCORER_IMPORTS)
    (env.solution / "predict.py").write_text(PATCHING + (ENV / "workspace" / "predict.py").read_text())
    attacked = env.score()
    assert sorted(p.name for p in markers.iterdir()) == [], [p.read_text() for p in markers.iterdir()]
    assert start["raw"] is not None and attacked["raw"] == pytest.approx(start["raw"], abs=1e-6), (attacked, start)
