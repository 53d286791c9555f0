"""Held-out finals (`final_split`) and probing, through the real CLI on the local backend and real
SQLite: the `counter` fixture's scorer reads `tuned I F` as I on the intermediate split and F on the
held-out one, standing for a solution fitted to the split its score calls used."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from .conftest import run_cli

pytestmark = pytest.mark.slow

PROFILE = '''
[profiles.heldout]
resources = { gpus = 0, cpus = 1, memory_gb = 1 }
direction = "higher"
final_score = "best"
score_timeout_s = 5
anchors = { start = 1.0, reference = 11.0, source = "by construction" }
params = { secret_file = "answer.txt", split = "intermediate" }
final_split = { params = { split = "final" }, anchors = { start = 1.0, reference = 21.0 }, margin = 0.1 }
'''


def test_an_agent_tuned_to_the_intermediate_split_shows_a_gap(fixture_envs: Path, tmp_path: Path,
                                                              db_path: Path) -> None:
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + PROFILE)
    (fixture_envs / "counter" / "reference" / "value.txt").write_text("tuned 11 21")  # as good on both splits
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "tuned 9 5"}}, {"score": {}}, {"score": {}},
        {"submit": None}]}))
    for agent in (("replay", "--agent-arg", f"script={script}", "-k", "2"), ("reference",)):
        ran = run_cli("run", "--env", "counter", "--profile", "heldout", "--agent", *agent, "--budget", "2m",
                      "--backend", "local", "--db", str(db_path), "--no-calibrate", env=env)
        assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db_path) as connection:
        heldout = connection.execute("select attempt_id, raw from score_events where kind = 'heldout' "
                                     "order by attempt_id").fetchall()
        finals = connection.execute("select final_raw from attempts order by id").fetchall()
    # the final score is still the score log's (RE-Bench's rule); the held-out final is a row beside it
    assert heldout == [(1, 5.0), (2, 5.0), (3, 21.0)] and finals == [(9.0,), (9.0,), (11.0,)]
    from rebench.api import report

    made = report(db_path, budgets="2m", at="2m", n_bootstrap=200)
    assert made is not None
    agents = {a.agent: a for a in made.agents}
    tuned, reference = agents["replay"], agents["reference"]
    # best intermediate 0.8, held-out (5 - 1) / (21 - 1) = 0.2: a gap of 0.6 on both attempts
    assert (tuned.heldout_gap, tuned.heldout_gap_low, tuned.heldout_gap_high) == pytest.approx((0.6, 0.6, 0.6))
    assert (tuned.probing, tuned.heldout_n) == (2, 2) and tuned.calls_per_hour and tuned.calls_per_hour > 0
    assert (reference.heldout_gap, reference.probing) == (pytest.approx(0.0), 0)
    summary = {s.agent: s for s in made.summary}
    assert summary["replay"].heldout_mean == pytest.approx(0.2) and summary["replay"].mean == pytest.approx(0.8)
    rows = {r.agent: r for r in made.rows if r.environment == "counter"}
    assert rows["replay"].heldout_mean == pytest.approx(0.2) and rows["reference"].heldout_mean == pytest.approx(1.0)
    shown = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    assert "held-out final 0.200 vs best intermediate 0.800: gap 0.600 (flagged: probing)" in shown
    text = " ".join(run_cli("report", "--budgets", "2m", "--at", "2m", "--n-bootstrap", "50", "--db", str(db_path),
                            env=env).stdout.split())
    assert "0.800 (held-out 0.200)" in text and "0.600 [0.600, 0.600] (2/2;" in text and "final on held-out" in text
    # `rebench rescore` takes the held-out final again too, from the final snapshot
    rescored = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert rescored.returncode == 0, rescored.stderr
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("select final_raw, heldout_raw, heldout_normalized from rescores").fetchall() == [
            (9.0, 5.0, pytest.approx(0.2))]
