"""The README's main job, end to end: the kernel environment's tiny profile on this machine."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from .conftest import run_cli


def query(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


@pytest.mark.slow
@pytest.mark.torch
def test_reference_scores_near_one_and_start_near_zero_after_calibration(tmp_path: Path) -> None:
    db = tmp_path / "kernel.db"
    result = run_cli("run", "--env", "triton_cumsum", "--agent", "reference", "--profile", "tiny",
                     "--budget", "10m", "-k", "2", "--backend", "local", "--db", str(db), timeout=900)
    assert result.returncode == 0, result.stderr
    assert "measuring the starting and reference solutions" in result.stderr
    (start, reference), = query(db, "select start_raw, reference_raw from calibrations")
    assert reference < start - 0.69, "the reference solution should be at least 2x faster than the start"
    scores = query(db, "select status, anchors_kind, final_normalized from attempts order by id")
    assert [s[:2] for s in scores] == [("done", "calibrated"), ("done", "calibrated")]
    assert all(0.8 <= s[2] <= 1.25 for s in scores), scores

    script = tmp_path / "start-only.yaml"
    # Only the starting solution is scored; three score calls, of which the best counts as in any attempt,
    # so one call slowed by a busy shared CPU does not decide the result.
    script.write_text(yaml.safe_dump({"actions": [{"score": {}}, {"score": {}}, {"score": {}}, {"submit": None}]}))
    result = run_cli("run", "--env", "triton_cumsum", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "tiny", "--budget", "5m", "--backend", "local", "--db", str(db), timeout=600)
    assert result.returncode == 0, result.stderr
    assert "measuring" not in result.stderr, "calibration must be reused on the same machine"
    (raw,), = query(db, "select final_raw from attempts where agent = 'replay'")
    unclipped = (raw - start) / (reference - start)
    assert -0.2 <= unclipped <= 0.2, (raw, start, reference)
