"""Which solution a held-out final scores (docs/heldout.md): under the `best` rule the attempt's score is
its best score call, so the held-out final must score that call's solution, not the one the attempt
ended with; where that call's snapshot was cut by the snapshot budget it falls back to the final solution
and says so; under other rules it scores the final solution. Real CLI, local backend, real SQLite, on
the `counter` fixture, whose scorer reads `tuned I F` as I on the intermediate split and F on the
held-out one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import run_cli

pytestmark = pytest.mark.slow

PROFILE = '''
[profiles.heldout]
resources = {{ gpus = 0, cpus = 1, memory_gb = 1 }}
direction = "higher"
final_score = "best"
score_timeout_s = 5
anchors = {{ start = 1.0, reference = 11.0, source = "by construction" }}
params = {{ secret_file = "answer.txt", split = "intermediate" }}
final_split = {{ params = {{ split = "final" }}, anchors = {{ start = 1.0, reference = 21.0 }}, margin = 0.1 }}
snapshot = {{ max_bytes = {max_bytes} }}
'''


def _run(fixture_envs: Path, tmp_path: Path, db_path: Path, actions: list[dict[str, Any]], *extra: str,
         max_bytes: int = 1 << 20) -> dict[str, Any]:
    """One replay attempt on the `heldout` profile; its held-out row (raw, details) and its final raw."""
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + PROFILE.format(max_bytes=max_bytes))
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    ran = run_cli("run", "--env", "counter", "--profile", "heldout", "--agent", "replay", "--agent-arg",
                  f"script={script}", "--budget", "2m", "--backend", "local", "--db", str(db_path),
                  "--no-calibrate", *extra, env=env)
    assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db_path) as connection:
        (raw, details), = connection.execute("select raw, details from score_events where kind = 'heldout'")
        calls = [row[0] for row in connection.execute(
            "select id from score_events where kind = 'intermediate' order by id")]
        final_raw, = connection.execute("select final_raw from attempts").fetchone()
    shown = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    return {"raw": raw, "details": json.loads(details), "calls": calls, "final_raw": final_raw, "shown": shown}


GOOD_THEN_BAD = [
    {"write_file": {"path": "value.txt", "content": "tuned 9 15"}}, {"score": {}},
    {"write_file": {"path": "value.txt", "content": "tuned 3 2"}}, {"score": {}},
    {"submit": None}]


def test_under_best_the_heldout_final_scores_the_best_calls_solution(fixture_envs: Path, tmp_path: Path,
                                                                     db_path: Path) -> None:
    got = _run(fixture_envs, tmp_path, db_path, GOOD_THEN_BAD)
    assert got["final_raw"] == 9.0  # the rule's number: the first call's
    assert got["raw"] == 15.0, "the held-out final must come from the solution behind the best call, not the last"
    details = got["details"]
    assert (details["solution"], details["score_id"], details.get("fallback")) == ("best_call", got["calls"][0], None)
    assert Path(details["snapshot"]).is_dir() and (Path(details["snapshot"]) / "value.txt").read_text() == "tuned 9 15"
    # (15 - 1) / (21 - 1) = 0.7 against the best intermediate (9 - 1) / (11 - 1) = 0.8
    assert "held-out final 0.700 vs best intermediate 0.800: gap 0.100" in got["shown"]
    assert "held-out final scored the solution of score call 1 (the best)" in got["shown"]
    # `rebench rescore` takes the held-out final again from the same solution, and the final score by the
    # same rule: each call's solution scored once (rule `best`, not rescore_best's repeats), the best counts
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    rescored = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert rescored.returncode == 0, rescored.stderr
    with sqlite3.connect(db_path) as connection:
        (rule, final_raw, heldout_raw, scores), = connection.execute(
            "select rule, final_raw, heldout_raw, scores from rescores").fetchall()
    assert (rule, final_raw, heldout_raw) == ("best", 9.0, 15.0)
    best = got["details"]["snapshot"]
    assert [(c["kind"], c["snapshot"]) for c in json.loads(scores)] == [
        ("rescore", best), ("rescore", best.replace("score-001", "score-002")), ("heldout", best)]


def test_a_best_call_snapshot_cut_by_the_budget_falls_back_to_the_final_solution(fixture_envs: Path, tmp_path: Path,
                                                                                 db_path: Path) -> None:
    actions = [{"write_file": {"path": "value.txt", "content": "tuned 9 15"}},
               {"write_file": {"path": "pad.bin", "content": "x" * 4000}}, {"score": {}},
               {"write_file": {"path": "value.txt", "content": "tuned 3 2"}},
               {"write_file": {"path": "pad.bin", "content": ""}}, {"score": {}}, {"submit": None}]
    got = _run(fixture_envs, tmp_path, db_path, actions, max_bytes=1000)
    assert (got["final_raw"], got["raw"]) == (9.0, 2.0)
    details = got["details"]
    assert details["solution"] == "final" and details["score_id"] is None
    assert "score call 1" in details["fallback"] and "cut by the snapshot budget" in details["fallback"]
    assert ("held-out final scored the final solution, not the best call's: the snapshot of score call 1 (the best, "
            "raw 9) was cut by the snapshot budget") in got["shown"]


def test_under_last_the_heldout_final_scores_the_final_solution(fixture_envs: Path, tmp_path: Path,
                                                                db_path: Path) -> None:
    actions = [*GOOD_THEN_BAD[:4], {"write_file": {"path": "value.txt", "content": "tuned 5 4"}}, {"submit": None}]
    got = _run(fixture_envs, tmp_path, db_path, actions, "--final-rule", "last")
    assert (got["final_raw"], got["raw"]) == (3.0, 4.0)  # the rule's last call; held-out on what it ended with
    assert (got["details"]["solution"], got["details"].get("fallback")) == ("final", None)
    assert "held-out final scored the final solution" in got["shown"]
