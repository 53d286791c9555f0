"""Lay out an environment the way a sandbox does, for tests and the tiny-anchor script:
build assets (cached by content hash), then home/ (static home, built home, the scoring
folder), home/solution/ (workspace, built workspace) and protected/, and run the scorer
through rebench's stdlib scoring helper exactly as the harness does.

Used by environments/conftest.py and environments/_common/measure_anchors.py; not
copied into environments (it needs the rebench package).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rebench.environments.registry import Environment, EnvironmentRegistry

ENVIRONMENTS = Path(__file__).resolve().parents[1]
HELPER = ENVIRONMENTS.parent / "rebench" / "scoring" / "score_helper.py"


def environment(name: str) -> Environment:
    return EnvironmentRegistry(ENVIRONMENTS).get(name)


def built_assets(env: Environment, profile: str) -> Path:
    """The harness's own asset cache (build.py runs once per content hash), shared with `rebench run`."""
    from rebench.environments.build import assets_dir

    assets = assets_dir(env, profile)
    assert assets is not None, f"{env.name} has no build.py"
    return assets


def _copy_tree(source: Path | None, dest: Path) -> None:
    if source is None or not source.exists():
        return
    for item in source.iterdir():
        if item.name in ("__pycache__", ".complete"):
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(item, dest / item.name)


def lay_out(env: Environment, profile: str, root: Path, *, reference: bool = False) -> dict[str, Path]:
    """Fill root/home, root/home/solution, root/protected; with `reference`, lay the
    reference solution over the solution folder as the reference agent does."""
    assets = built_assets(env, profile)
    home, protected = root / "home", root / "protected"
    solution = home / "solution"
    for folder in (home, solution, protected):
        folder.mkdir(parents=True, exist_ok=True)
    _copy_tree(env.home_dir, home)
    _copy_tree(assets / "home", home)
    _copy_tree(env.scoring_dir, home)
    _copy_tree(env.workspace_dir, solution)
    _copy_tree(assets / "workspace", solution)
    _copy_tree(env.protected_dir, protected)
    _copy_tree(assets / "protected", protected)
    (protected / "scoring").mkdir()
    _copy_tree(env.scoring_dir, protected / "scoring")  # what the harness runs: a copy the agent cannot change
    if reference:
        _copy_tree(env.reference_dir, solution)
    return {"home": home, "solution": solution, "protected": protected}


def sandbox_env(paths: dict[str, Path]) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"REBENCH_HOME": str(paths["home"]), "REBENCH_SOLUTION": str(paths["solution"]),
                "OMP_NUM_THREADS": "1"})
    return env


def run_reference(paths: dict[str, Path], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "run.sh"], cwd=paths["solution"], env=sandbox_env(paths), timeout=timeout,
                          capture_output=True, text=True, check=False)


def run_score(env: Environment, profile: str, paths: dict[str, Path]) -> dict:
    """Score through rebench's helper, with the ctx the harness passes."""
    ctx = {**env.score_params(profile), "home": str(paths["home"]), "solution": str(paths["solution"]),
           "protected": str(paths["protected"])}
    work = paths["home"].parent
    (work / "params.json").write_text(json.dumps(ctx))
    out = work / "result.json"
    subprocess.run([sys.executable, str(HELPER), "--program", str(paths["protected"] / "scoring" / "score.py"),
                    "--params", str(work / "params.json"), "--out", str(out),
                    "--log", str(paths["protected"] / "score.log"),
                    "--timeout", str(env.profile(profile).score_timeout_s)],
                   check=True, env=sandbox_env(paths), cwd=paths["home"])
    return json.loads(out.read_text())


def normalized(env: Environment, profile: str, raw: float | None) -> float:
    from rebench.scoring.normalize import normalize

    anchors = env.profile(profile).anchors
    return normalize(raw, anchors.start, anchors.reference, clip=False)
