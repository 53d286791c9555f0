"""What running the solution in a confined child costs the kernel score (tiny profile).

The scorer charges CPU time from before the input is handed over until the result has
been copied out of the child; a bare in-process call is the lower bound. This prints
both medians per solution, so the overhead the anchors absorb is visible, the harness's share
the scorer reports (`harness_overhead_ms`, a do-nothing prefix_sum on the same path), the
seconds one scoring call takes (child start, import, all calls and checks; the final rule
multiplies scoring calls, so this must not grow), and the ratio of the starting solution's
scored time to the reference's (what the anchors rest on).

    python benchmarks/kernel_scoring_overhead.py [--rounds 3] [--baseline GIT-REVISION]

With --baseline, the scorer committed at that revision scores the same solutions in turn with
the current one, so a change of scoring can be checked against the ratio it must keep.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
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


def _scorer_at(revision: str, folder: Path):
    """The kernel scorer as committed at `revision` (git), loaded from a copy in `folder`."""
    for name in ("score.py", "kernel_worker.py"):
        path = f"environments/triton_cumsum/scoring/{name}"
        source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=REPO, capture_output=True, check=True)
        (folder / name).write_bytes(source.stdout)
    return _load(folder / "score.py", f"kernel_score_{revision}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", metavar="REV",
                        help="also score with the scorer committed at this git revision, in alternation")
    args = parser.parse_args()
    params = tomllib.loads((ENV / "environment.toml").read_text())["profiles"]["tiny"]["params"]
    scoring_env = {key: str(value) for key, value in params.get("scoring_env", {}).items()}
    if any(os.environ.get(key) != value for key, value in scoring_env.items()):
        # The profile's allocator settings must be in force from process start, as the helper sets them.
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **scoring_env})
    torch.set_num_threads(int(params["torch_threads"]))
    with tempfile.TemporaryDirectory() as protected, tempfile.TemporaryDirectory() as old:
        scorers = {"current": _load(ENV / "scoring" / "score.py", "kernel_score")}
        if args.baseline:
            scorers[args.baseline] = _scorer_at(args.baseline, Path(old))
        scored: dict[tuple[str, str], list[float]] = {}
        seconds: dict[tuple[str, str], list[float]] = {}
        overhead: dict[tuple[str, str], list[float]] = {}
        bare: dict[str, list[float]] = {}
        for _ in range(args.rounds):  # scorers and solutions in turns, so a busy spell hits all alike
            for folder in ("workspace", "reference"):
                for name, score in scorers.items():
                    ctx = {**params, "solution": str(ENV / folder),
                           "confine_command": score_helper.confine_command(protected)}
                    started = time.perf_counter()
                    message = score.score(ctx)["message"]
                    seconds.setdefault((name, folder), []).append(time.perf_counter() - started)
                    scored.setdefault((name, folder), []).append(message["time_ms"])
                    if "harness_overhead_ms" in message:
                        overhead.setdefault((name, folder), []).append(message["harness_overhead_ms"])
                bare.setdefault(folder, []).append(
                    bare_ms(folder, int(params["n_elements"]), int(params["timed_calls"])))
    print(f"median of {args.rounds} rounds; in-process: the solution called bare in this process")
    for folder in ("workspace", "reference"):
        figures = "   ".join(f"{name}: {statistics.median(scored[name, folder]):7.2f} ms" for name in scorers)
        print(f"{folder:9}  {figures}   in-process: {statistics.median(bare[folder]):7.2f} ms")
        for name in scorers:
            share = f", harness share {statistics.median(overhead[name, folder]):.2f} ms" \
                if overhead.get((name, folder)) else ""
            print(f"{'':9}  {name} scorer: {statistics.median(seconds[name, folder]):.2f} s per scoring call{share}")
    # The anchors rest on this ratio: a change of scoring must leave it within 10%.
    ratios = {name: statistics.median(scored[name, "workspace"]) / statistics.median(scored[name, "reference"])
              for name in scorers}
    for name, ratio in ratios.items():
        print(f"start / reference, {name} scorer: {ratio:.2f}x")
    if args.baseline:
        change = ratios["current"] / ratios[args.baseline] - 1
        print(f"change of the ratio against {args.baseline}: {change:+.1%}")


if __name__ == "__main__":
    main()
