"""The README's main job, end to end: the kernel environment's tiny profile on this machine.

The first run is the session's `kernel_first_run` (tests/conftest.py): on a fresh database it
measures this machine's anchors before its attempt; this test checks that run, then that a second
run on a database holding this machine's calibration uses it instead of measuring again. The second
run is on the `ci` profile (tiny's scoring with two re-score rounds instead of seven: 9 score calls
instead of 24), whose calibration is saved into the copied database from the first run's samples
(tests/conftest.py: `kernel_calibration_into`, the product's own `save_calibration`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, RecordedRun, kernel_calibration_into, run_cli


def query(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


@pytest.mark.slow
@pytest.mark.torch
def test_reference_scores_near_one_and_start_near_zero_after_calibration(
        tmp_path: Path, kernel_first_run: RecordedRun) -> None:
    result = kernel_first_run.result
    assert "measuring the starting and reference solutions" in result.stderr
    db = kernel_first_run.copy_to(tmp_path / "kernel.db")
    (start, reference), = query(db, "select start_raw, reference_raw from calibrations")
    assert reference < start - 0.69, "the reference solution should be at least 2x faster than the start"
    (status, anchors_kind, normalized), = query(db, "select status, anchors_kind, final_normalized from attempts")
    # the final is normalized with the anchors measured beside its re-scores (rebench.scoring.window)
    assert (status, anchors_kind) == ("done", "window")
    assert 0.8 <= normalized <= 1.25, normalized

    kernel_calibration_into(db, kernel_first_run, "ci")
    script = tmp_path / "start-only.yaml"
    # Only the starting solution is scored, three times; the snapshots are identical, so the final rule
    # re-scores that one solution `repeats` times and its median counts, as the anchors' did.
    script.write_text(yaml.safe_dump({"actions": [{"score": {}}, {"score": {}}, {"score": {}}, {"submit": None}]}))
    result = run_cli("run", "--env", "triton_cumsum", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "ci", "--budget", "5m", "--backend", "local", "--db", str(db), timeout=600,
                     env={"REBENCH_ENVIRONMENTS": str(REPO / "environments")})
    assert result.returncode == 0, result.stderr
    assert "measuring" not in result.stderr, "calibration must be reused on the same machine"
    assert query(db, "select profile from calibrations order by profile") == [("ci",), ("tiny",)]
    (raw,), = query(db, "select final_raw from attempts where agent = 'replay'")
    unclipped = (raw - start) / (reference - start)
    assert -0.2 <= unclipped <= 0.2, (raw, start, reference)
