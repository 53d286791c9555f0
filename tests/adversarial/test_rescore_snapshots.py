"""`rebench rescore` scores host copies of an agent's solution long after the attempt. Whatever
writes those folders in between (on the local backend a process the agent left behind runs as the
same user as the harness) would have its solution scored in the attempt's name. Candidate snapshots
carry the digest taken when they were copied, and a folder whose content no longer matches it is
refused: with that check removed, the rewritten snapshot below was re-scored (raw 1000) instead of
being skipped."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from ..conftest import run_cli


@pytest.mark.adversarial
@pytest.mark.slow
def test_a_snapshot_rewritten_after_the_attempt_is_not_rescored(fixture_envs: Path, tmp_path: Path,
                                                                 db_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "7"}}, {"score": {}}, {"submit": None}]}))
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    ran = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--profile",
                  "rescore", "--budget", "1m", "--backend", "local", "--db", str(db_path), "--no-calibrate", env=env)
    assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db_path) as connection:
        (snapshot,), = connection.execute("select snapshot_path from attempts").fetchall()
    (Path(snapshot).parent / "score-001" / "value.txt").write_text("1000")
    result = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert result.returncode != 0 and "changed since it was taken" in result.stderr, result.stdout + result.stderr
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("select count(*) from rescores").fetchall() == [(0,)]
