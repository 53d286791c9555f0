"""High-Norm Tokens `tiny`: how long the build and one scoring call take here (issue 30's goals:
build <= 5 min, one scoring call <= 60 s), with the starting and reference raw scores.

    python -m benchmarks.high_norm_tokens_timing

Runs the environment's build.py for the tiny profile into a fresh temporary folder (not the
harness cache, so it is always timed), then scores the starting and the reference solution with
the environment's scorer as the scoring helper calls it (the helper's Landlock confinement for
predict.py where this kernel has it). Wall-clock seconds; on a machine shared with other jobs
they are upper bounds.
"""

from __future__ import annotations

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
ENV = ROOT / "environments" / "high_norm_tokens"
GOAL_BUILD_S, GOAL_SCORE_S = 300.0, 60.0


def score(built: Path, solution: Path) -> tuple[dict[str, Any], float]:
    from rebench.kit.buildutil import load_file
    from rebench.scoring.score_helper import confine_command, confinement_unavailable

    scorer = load_file("high_norm_tokens_score", ENV / "scoring" / "score.py")
    params = tomllib.loads((ENV / "environment.toml").read_text(encoding="utf-8"))["profiles"]["tiny"]["params"]
    ctx: dict[str, Any] = {**params, "home": str(built / "home"), "solution": str(solution),
                           "protected": str(built / "protected"), "threads": 1}
    if confinement_unavailable() is None:
        ctx["confine_command"] = confine_command(str(built / "protected"))
    started = time.perf_counter()
    result = scorer.score(ctx)
    return result, time.perf_counter() - started


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "assets"
        started = time.perf_counter()
        subprocess.run([sys.executable, str(ENV / "build.py"), "--profile", "tiny", "--out", str(out)],
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        build_s = time.perf_counter() - started
        print(f"build: {build_s:.0f} s (goal <= {GOAL_BUILD_S:.0f} s)")
        worst = 0.0
        for name in ("workspace", "reference"):
            solution = Path(scratch) / name
            shutil.copytree(ENV / name, solution)
            result, seconds = score(out, solution)
            worst = max(worst, seconds)
            print(f"score {name}: raw {result['raw']!r} in {seconds:.1f} s (goal <= {GOAL_SCORE_S:.0f} s)")
    return 0 if build_s <= GOAL_BUILD_S and worst <= GOAL_SCORE_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
