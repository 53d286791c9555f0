"""How long score@k with bootstrap intervals takes on METR's run file, and its peak memory.

For every agent and per-attempt time limit in the file (RE-Bench rows only), every k in
powers of two up to 128, with 1000 bootstrap resamples (equal-weight average over
environments). METR's public analysis code does this one resample at a time in Python
(about 9 s on the reference machine); the target here is under 1 s. `--loop` also runs a
one-resample-at-a-time version of the same computation for comparison on this machine.

`--report` also times the whole report built from the same rows (every allocation, the
comparable best allocations, the headline table and the per-agent numbers without runs above 2),
without reading a store or drawing plots.

    python -m benchmarks.report_speed [--file PATH] [--n-bootstrap 1000] [--loop] [--report]   (from the repo root)
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from collections import defaultdict
from pathlib import Path

import numpy as np

from rebench.report.bootstrap import EnvironmentScores, bootstrap_score_at_k
from rebench.report.compute import build_report
from rebench.report.data import HUMAN_AGENT, HUMAN_ATTEMPT_S, ReportData, RunRecord
from rebench.report.estimators import BestOfK, score_at_k
from rebench.report.importer import parse_metr_runs
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.service import settings_from_options

DEFAULT_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"
KS = [2**i for i in range(8)]

Groups = dict[tuple[str, float], dict[str, EnvironmentScores]]


def load_groups(path: Path, info: EnvironmentInfo) -> Groups:
    rows, _ = parse_metr_runs(path, info)
    scores: dict[tuple[str, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        scores[(row.agent, row.budget_s)][row.environment].append(row.score)
    return {
        key: {env: EnvironmentScores(np.asarray(v), info.best_of_k(env)) for env, v in envs.items()}
        for key, envs in scores.items()
    }


def vectorized(groups: Groups, n_bootstrap: int, seed: int) -> dict[tuple[str, float], np.ndarray]:
    return {
        key: bootstrap_score_at_k(data, KS, "expected_max", n_bootstrap, seed).mean_point
        for key, data in groups.items()
    }


def whole_report(path: Path, info: EnvironmentInfo, n_bootstrap: int, seed: int) -> float:
    """Seconds to build the full report (no store, no plots) from the file's rows."""
    rows, _ = parse_metr_runs(path, info)
    runs = [
        RunRecord(i, row.environment, row.agent, "imported", row.budget_s, row.score, anchors="imported")
        for i, row in enumerate(rows)
    ]
    humans = [r for r in runs if r.agent == HUMAN_AGENT and r.budget_s == HUMAN_ATTEMPT_S]
    settings = settings_from_options(n_bootstrap=n_bootstrap, seed=seed)
    start = time.perf_counter()
    build_report(ReportData(runs=runs, humans=humans), settings, info)
    return time.perf_counter() - start


def one_at_a_time(groups: Groups, n_bootstrap: int, seed: int) -> None:
    """The shape of METR's code: a Python loop over resamples, the estimator applied to each."""
    rng = np.random.default_rng(seed)
    for data in groups.values():
        for k in KS:
            replicates = []
            for _ in range(n_bootstrap):
                per_env = []
                for env in data.values():
                    sample = rng.choice(env.scores, size=env.scores.size, replace=True)
                    mode: BestOfK = env.best_of_k
                    per_env.append(score_at_k(sample, [k], "expected_max", mode)[0])
                replicates.append(np.mean(per_env))
            np.percentile(replicates, [2.5, 97.5])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--n-bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--loop", action="store_true", help="also time the one-resample-at-a-time version")
    parser.add_argument("--report", action="store_true", help="also time building the whole report")
    args = parser.parse_args()

    groups = load_groups(args.file, EnvironmentInfo())
    runs = sum(env.scores.size for data in groups.values() for env in data.values())
    print(f"{len(groups)} agent x time-limit groups, {runs} runs, k = {KS}, {args.n_bootstrap} resamples")

    start = time.perf_counter()
    vectorized(groups, args.n_bootstrap, args.seed)
    elapsed = time.perf_counter() - start
    tracemalloc.start()  # a second run under tracemalloc, which slows allocation, for the peak
    vectorized(groups, args.n_bootstrap, args.seed)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    max_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"vectorized: {elapsed:.3f} s, peak traced memory {peak / 2**20:.1f} MiB", end="")
    print(f", process max RSS {max_rss_mb:.0f} MiB")

    if args.report:
        report_s = whole_report(args.file, EnvironmentInfo(), args.n_bootstrap, args.seed)
        print(f"whole report (every allocation, headline, per-agent numbers): {report_s:.2f} s")

    if args.loop:
        start = time.perf_counter()
        one_at_a_time(groups, args.n_bootstrap, args.seed)
        loop_s = time.perf_counter() - start
        print(f"one resample at a time: {loop_s:.1f} s ({loop_s / elapsed:.0f}x slower)")


if __name__ == "__main__":
    main()
