"""Window anchors are scored in the agent's own sandbox (rebench.scoring.window), so an agent gains
by making the reference solution score badly there: the worse the window's reference anchor, the
higher its own normalized final. Here the agent leaves a process behind that rewrites the solution
folder whenever the reference solution is laid into it. Stopping the agent's processes before the
re-scoring is what defeats it: with the local sandbox's kill made a no-op, this attack took the
window's reference anchor from 11 to 2 and the final from 0.6 to 6.0."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from ..conftest import run_cli

# Turns every reference laid into the solution folder into a much worse one; by path, since the
# folder is made anew for each solution the window lays into it.
SABOTEUR = ("f=$PWD/value.txt; setsid bash -c \"while true; do grep -qx 11 $f 2>/dev/null && echo 2 > $f; "
            "sleep 0.002; done\" > /dev/null 2>&1 < /dev/null &")


@pytest.mark.adversarial
def test_a_process_left_behind_cannot_spoil_the_reference_anchor(fixture_envs: Path, tmp_path: Path,
                                                                  db_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "7"}}, {"score": {}},
        {"bash": SABOTEUR}, {"sleep": 0.3}, {"submit": None}]}))
    result = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--profile",
                     "rescore", "--budget", "2m", "--backend", "local", "--db", str(db_path), "--no-calibrate",
                     env={"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"]})
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db_path) as connection:
        anchors = connection.execute("select raw from score_events where kind = 'anchor_reference'").fetchall()
        (final_raw, normalized, kind), = connection.execute(
            "select final_raw, final_normalized, anchors_kind from attempts").fetchall()
    assert anchors == [(11.0,)] * 3
    assert (final_raw, kind) == (7.0, "window") and normalized == pytest.approx(0.6)
