"""Does the final rule stop an agent from banking a lucky timing? A replay agent scores the
unchanged starting solution of Optimize a Kernel (`tiny`) N times (default 20) with two
CPU-bound processes running beside it, on a fresh database (so the anchors are calibrated under
the same load first), and the attempt's final normalized score is printed beside what RE-Bench's
rule (the best single call) would have given. The unchanged start is worth 0 by definition; the
goal under `final_score = "rescore_best"` is a final normalized score of at most 0.1.

    python -m benchmarks.rescore_replay [--scores 20] [--busy 2] [--backend local]   (repo root)
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

import yaml


def burn() -> None:
    """Keep one core busy until terminated."""
    while True:
        pass


def main() -> None:
    from rebench import api
    from rebench.campaign import CampaignSpec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scores", type=int, default=20, help="score calls of the unchanged start")
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the run")
    parser.add_argument("--backend", default="local")
    parser.add_argument("--final-rule", default=None, help="override the profile's final_score")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rescore-replay-") as folder:
        script = Path(folder) / "script.yaml"
        script.write_text(yaml.safe_dump({"actions": [{"score": {}}] * args.scores + [{"submit": None}]}))
        spec = CampaignSpec(environments=["triton_cumsum"], profile="tiny", budget_s="2h", backend=args.backend,
                            agent=api.AgentConfig(name="replay", args={"script": str(script)}),
                            final_rule=args.final_rule)
        busy = [multiprocessing.Process(target=burn, daemon=True) for _ in range(args.busy)]
        for process in busy:
            process.start()
        started = time.monotonic()
        try:
            result = api.run_campaign(spec, db=Path(folder) / "rebench.db")
        finally:
            for process in busy:
                process.terminate()
        elapsed = time.monotonic() - started
        from rebench.store.db import Store
        from rebench.store.measurements import Calibration
        from rebench.store.models import Attempt, ScoreEvent

        store = Store(Path(folder) / "rebench.db")
        with store.session() as session:
            attempt = session.get_one(Attempt, result.attempt_ids[0])
            calibration = session.query(Calibration).one()
            singles = [e.raw for e in session.query(ScoreEvent).filter_by(attempt_id=attempt.id, kind="intermediate")]
            rescores = [e.raw for e in session.query(ScoreEvent).filter_by(attempt_id=attempt.id, kind="rescore")]
            print(f"anchors (calibrated under load): start {calibration.start_raw:.4f}, "
                  f"reference {calibration.reference_raw:.4f}  samples {calibration.samples}")
            valid = sorted(r for r in singles if r is not None)
            print(f"{len(singles)} single score calls of the start: min {valid[0]:.4f}, max {valid[-1]:.4f}")
            print(f"re-scores: {rescores}")
            print(f"final rule {attempt.final_rule}: raw {attempt.final_raw}, normalized {attempt.final_normalized:.3f}"
                  f"  (goal <= 0.1)")
            print(f"RE-Bench's rule (best single call): raw {attempt.rule_raw}, "
                  f"normalized {attempt.rule_normalized:.3f}")
            print(f"{args.busy} busy processes beside it; {elapsed:.0f} s in all")


if __name__ == "__main__":
    main()
