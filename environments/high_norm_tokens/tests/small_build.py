"""A quick build of High-Norm Tokens for tests: the tiny profile's recipe with far fewer training
steps and tokens (the plant sizes the defect on the trained model, README "The planted defect",
so it shows as planted however long the model trained), made by the
environment's own build.py through `$REBENCH_BUILD_PARAMS`, and a scorer call as the harness
makes it (the profile's params, the folders, and the helper's Landlock confinement)."""

from __future__ import annotations

import atexit
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ENV = Path(__file__).resolve().parents[1]
REPO = ENV.parents[1]


def tiny_params() -> dict[str, Any]:
    meta = tomllib.loads((ENV / "environment.toml").read_text(encoding="utf-8"))
    return dict(meta["profiles"]["tiny"]["params"])


def quick_params() -> dict[str, Any]:
    params = copy.deepcopy(tiny_params())
    params["build_training"].update(train_tokens=40_000, steps=40)
    params["heldout_tokens"] = 20_000
    params["predict_timeout_s"] = 5
    return params


def build(out: Path) -> Path:
    """Run build.py for the quick recipe into `out` (home/, protected/); returns `out`."""
    params_file = out.parent / f"{out.name}-params.json"
    params_file.write_text(json.dumps({"profile": "tiny", "params": quick_params()}), encoding="utf-8")
    env = {**os.environ, "REBENCH_BUILD_PARAMS": str(params_file), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(ENV / "build.py"), "--profile", "tiny", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


_BUILT: list[Path] = []


def build_once() -> Path:
    """One quick build per test session, shared by the environment's tests and the attack tests
    (removed when the session's process exits)."""
    if not _BUILT:
        folder = Path(tempfile.mkdtemp(prefix="high-norm-tokens-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _BUILT.append(build(folder / "assets"))
    return _BUILT[0]


def score(built: Path, solution: Path, *, confined: bool = True) -> dict[str, Any]:
    """score.py's result for `solution` on the quick build, as the scoring helper calls it."""
    from rebench.kit.buildutil import load_file
    from rebench.scoring.score_helper import confine_command

    scorer = load_file("high_norm_tokens_score", ENV / "scoring" / "score.py")
    ctx: dict[str, Any] = {**quick_params(), "home": str(built / "home"), "solution": str(solution),
                           "protected": str(built / "protected"), "threads": 1}
    if confined:
        ctx["confine_command"] = confine_command(str(built / "protected"))
    return scorer.score(ctx)
