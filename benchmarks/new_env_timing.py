"""The two environments added from recent papers, `tiny`: how long the build and one scoring call
take here (issue 30's goals: build <= 5 min, one scoring call <= 60 s), with the starting and
reference raw scores.

    python -m benchmarks.new_env_timing [--env activation_sparsity|high_norm_tokens]

Runs the environment's build.py for the tiny profile into a fresh temporary folder (not the
harness cache, so it is always timed), then scores the starting and the reference solution with
the environment's scorer as the scoring helper calls it (the helper's Landlock confinement for
the agent's code where this kernel has it). Wall-clock seconds; on a machine shared with other
jobs they are upper bounds. Exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENTS = ("activation_sparsity", "high_norm_tokens")
GOAL_BUILD_S, GOAL_SCORE_S = 300.0, 60.0


def score(env: Path, built: Path, solution: Path) -> tuple[dict[str, Any], float]:
    from rebench.kit.buildutil import load_file
    from rebench.scoring.score_helper import confine_command, confinement_unavailable

    scorer = load_file(f"{env.name}_score", env / "scoring" / "score.py")
    params = tomllib.loads((env / "environment.toml").read_text(encoding="utf-8"))["profiles"]["tiny"]["params"]
    ctx: dict[str, Any] = {**params, "home": str(built / "home"), "solution": str(solution),
                           "protected": str(built / "protected"), "threads": 1}
    if confinement_unavailable() is None:
        ctx["confine_command"] = confine_command(str(built / "protected"))
    started = time.perf_counter()
    result = scorer.score(ctx)
    return result, time.perf_counter() - started


def timed(env: Path) -> bool:
    """Build and score one environment; whether it met both goals."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "assets"
        started = time.perf_counter()
        subprocess.run([sys.executable, str(env / "build.py"), "--profile", "tiny", "--out", str(out)],
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        build_s = time.perf_counter() - started
        print(f"{env.name} build: {build_s:.0f} s (goal <= {GOAL_BUILD_S:.0f} s)")
        worst = 0.0
        for name in ("workspace", "reference"):
            solution = Path(scratch) / name
            shutil.copytree(env / name, solution)
            result, seconds = score(env, out, solution)
            worst = max(worst, seconds)
            print(f"{env.name} score {name}: raw {result['raw']!r} in {seconds:.1f} s (goal <= {GOAL_SCORE_S:.0f} s)")
    return build_s <= GOAL_BUILD_S and worst <= GOAL_SCORE_S


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=ENVIRONMENTS, action="append", help="default: both")
    names = parser.parse_args().env or list(ENVIRONMENTS)
    met = [timed(ROOT / "environments" / name) for name in names]
    return 0 if all(met) else 1


if __name__ == "__main__":
    raise SystemExit(main())
