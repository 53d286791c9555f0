"""What running the solution in a confined child costs the kernel score (tiny profile).

The scorer charges CPU time from before the input is handed over until the result has
been copied out of the child; a bare in-process call is the lower bound. This prints
both medians per solution, so the overhead the anchors absorb is visible, and the ratio of the
starting solution's scored time to the reference's (what the anchors rest on).

    python benchmarks/kernel_scoring_overhead.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
ENV = REPO / "environments" / "triton_cumsum"
sys.path.insert(0, str(REPO / "rebench" / "scoring"))

import score_helper  # noqa: E402


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bare_ms(folder: str, n: int, calls: int) -> float:
    """Median CPU ms of the solution called in this process, as the old in-process scorer timed it."""
    prefix_sum = _load(ENV / folder / "solution.py", f"bare_{folder}").prefix_sum
    generator = np.random.Generator(np.random.PCG64(0))
    times = []
    for index in range(calls + 3):
        x = torch.from_numpy(generator.integers(-10, 10, size=n, dtype=np.int32))
        started = time.process_time()
        prefix_sum(x)
        if index >= 3:
            times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    params = tomllib.loads((ENV / "environment.toml").read_text())["profiles"]["tiny"]["params"]
    scoring_env = {key: str(value) for key, value in params.get("scoring_env", {}).items()}
    if any(os.environ.get(key) != value for key, value in scoring_env.items()):
        # The profile's allocator settings must be in force from process start, as the helper sets them.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **scoring_env})
    score = _load(ENV / "scoring" / "score.py", "kernel_score")
    torch.set_num_threads(int(params["torch_threads"]))
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as protected:
        for folder in ("workspace", "reference"):
            scored, bare = [], []
            for _ in range(args.rounds):
                confine = score_helper.confine_command(protected)
                ctx = {**params, "solution": str(ENV / folder), "confine_command": confine}
                result = score.score(ctx)
                scored.append(result["message"]["time_ms"])
                bare.append(bare_ms(folder, int(params["n_elements"]), int(params["timed_calls"])))
            medians[folder] = statistics.median(scored)
            print(f"{folder:9}  child, confined: {statistics.median(scored):7.2f} ms   "
                  f"in-process: {statistics.median(bare):7.2f} ms   (median of {args.rounds} rounds)")
    # The anchors rest on this ratio: a change of scoring must leave it within 10%.
    print(f"start / reference, as scored: {medians['workspace'] / medians['reference']:.2f}x")


if __name__ == "__main__":
    main()
