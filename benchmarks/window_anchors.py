"""Anchors measured beside the solution: the reference agent's normalized final on a busy machine,
normalized with its re-scoring window's anchors (rebench.scoring.window) and, side by side, with
anchors calibrated once before the attempts (the method before window anchors).

On a fresh database, with CPU-bound processes running beside everything (two by default): the
environment is built, this machine's anchors are calibrated (`rebench envs calibrate`), then the
reference agent makes N attempts (default 8) at Optimize a Kernel (`tiny`) through `rebench run`'s
own path. Each attempt's final raw score (the median of its re-scores) is normalized both ways; the
two columns differ only in where the anchors were measured. Goal: with window anchors, sd <= 0.03
over the attempts and every attempt within 0.9-1.1.

    python -m benchmarks.window_anchors [--attempts 8] [--busy 2] [--backend docker|local] [--db PATH]

The backend defaults to what `rebench run` picks (Docker when an engine answers, else local).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_SD = 0.03
GOAL_RANGE = (0.9, 1.1)
# Spins until its parent (this script) is gone, so a killed benchmark leaves no load behind.
BUSY_LOOP = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(1_000_000): pass\n"


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_average() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def run(args: argparse.Namespace, db: Path) -> tuple[list[dict[str, float | None]], dict[str, Any]]:
    from rebench import api
    from rebench.campaign import CampaignSpec

    backend = api.build_environment("triton_cumsum", "tiny", args.backend, observer=api.Observer(log=log))
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(os.getpid())]) for _ in range(args.busy)]
    began = time.monotonic()
    info: dict[str, Any] = {"backend": backend, "load_before": load_average()}
    try:
        calibration = api.calibrate("triton_cumsum", "tiny", backend, db=db, build=False,
                                    observer=api.Observer(log=log))
        info["calibration_s"] = time.monotonic() - began
        spec = CampaignSpec(environments=["triton_cumsum"], profile="tiny", budget_s="10m", k=args.attempts,
                            backend=backend, agent=api.AgentConfig(name="reference"))
        result = api.run_campaign(spec, db=db, calibrate=False,
                                  observer=api.Observer(progress=lambda i, m: log(f"attempt {i}: {m}")))
    finally:
        for process in busy:
            process.kill()
            process.wait()
    info.update(elapsed_s=time.monotonic() - began, load_after=load_average(),
                start=calibration.start_raw, reference=calibration.reference_raw)
    return measured(db, result.attempt_ids, calibration.start_raw, calibration.reference_raw), info


def measured(db: Path, ids: list[int], start: float, reference: float) -> list[dict[str, float | None]]:
    """Per attempt: its final raw score, its window's anchors, and the final normalized both ways."""
    from sqlalchemy import select

    from rebench.scoring.normalize import normalize
    from rebench.scoring.window import window_anchors
    from rebench.store.db import Store
    from rebench.store.models import Attempt, ScoreEvent

    store = Store(db)
    rows = []
    try:
        with store.session() as session:
            for attempt_id in ids:
                attempt = session.get_one(Attempt, attempt_id)
                events = session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt_id)).all()
                window = window_anchors(events, "lower")
                rows.append({
                    "id": attempt_id, "final_raw": attempt.final_raw,
                    "window_start": window.start if window else None,
                    "window_reference": window.reference if window else None,
                    "window": attempt.final_normalized if attempt.anchors_kind == "window" else None,
                    "calibrated": normalize(attempt.final_raw, start, reference),
                })
    finally:
        store.close()
    return rows


def summary(values: list[float | None]) -> str:
    valid = [v for v in values if v is not None]
    if len(valid) < 2:
        return "too few values"
    low, high = GOAL_RANGE
    met = statistics.stdev(valid) <= GOAL_SD and len(valid) == len(values) and all(low <= v <= high for v in valid)
    return (f"mean {statistics.fmean(valid):.3f}  sd {statistics.stdev(valid):.3f}  min {min(valid):.3f}  "
            f"max {max(valid):.3f}  goal {'met' if met else 'NOT met'}")


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=8)
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the run")
    parser.add_argument("--backend", default=None, help="docker or local (default: as `rebench run` picks)")
    parser.add_argument("--db", type=Path, default=None, help="keep the database here (default: a throwaway one)")
    args = parser.parse_args()
    if args.attempts < 2 or args.busy < 0:
        parser.error(f"--attempts must be at least 2 (got {args.attempts}) and --busy at least 0 (got {args.busy})")
    with tempfile.TemporaryDirectory(prefix="window-anchors-") as folder:
        db = args.db or Path(folder) / "rebench.db"
        rows, info = run(args, db)
    print(f"\nreference agent on triton_cumsum (tiny), {args.attempts} attempts, backend {info['backend']}, "
          f"{args.busy} CPU-bound process(es) beside it; load average {info['load_before']} before, "
          f"{info['load_after']} after; {info['elapsed_s']:.0f} s in all")
    print(f"calibrated once before the attempts ({info['calibration_s']:.0f} s): start {info['start']:.4f}, "
          f"reference {info['reference']:.4f}")
    print(f"{'attempt':>7} {'final raw':>9} {'window start':>12} {'window ref':>10} {'window':>7} {'calibrated':>10}")
    for row in rows:
        print(f"{row['id']:>7} {fmt(row['final_raw'], 4):>9} {fmt(row['window_start'], 4):>12} "
              f"{fmt(row['window_reference'], 4):>10} {fmt(row['window']):>7} {fmt(row['calibrated']):>10}")
    print(f"window anchors    : {summary([r['window'] for r in rows])}")
    print(f"calibrated anchors: {summary([r['calibrated'] for r in rows])}")
    print(f"goal: sd <= {GOAL_SD} and every attempt within {GOAL_RANGE[0]}-{GOAL_RANGE[1]} (normalized)")


if __name__ == "__main__":
    main()
