"""`rebench rescore` of attempts under the `best` rule (RE-Bench's: the attempt's score is its best score
call). Where the attempt kept a snapshot at each score call (a profile with a held-out split), each valid
call's solution is scored again and the best re-score counts, as the rule counts the calls; without
them the solution it ended with is, and the re-score says so. Real CLI, local backend, real SQLite, on
the `counter` fixture (its scorer reads `tuned I F` as I on the intermediate split, F on the held-out one;
`crash` makes it raise)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import run_cli
from .test_heldout_best_call import PROFILE  # the `heldout` profile both files add to `counter`

pytestmark = pytest.mark.slow

SCORER_FIX = ('    return {"raw": value,', '    if value > 8:  # the fix: over 8 was never right\n'
              '        return {"raw": None, "message": {"error": "over the limit"}}\n    return {"raw": value,')


def rows(db: Path, query: str) -> list[Any]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def attempt(fixture_envs: Path, tmp_path: Path, db_path: Path, actions: list[dict[str, Any]], profile: str,
            max_bytes: int = 1 << 20) -> dict[str, str]:
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + PROFILE.format(max_bytes=max_bytes))
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    ran = run_cli("run", "--env", "counter", "--profile", profile, "--agent", "replay", "--agent-arg",
                  f"script={script}", "--budget", "2m", "--backend", "local", "--db", str(db_path),
                  "--no-calibrate", env=env)
    assert ran.returncode == 0, ran.stderr
    return env


def write(content: str) -> dict[str, Any]:
    return {"write_file": {"path": "value.txt", "content": content}}


def fix_the_scorer(fixture_envs: Path) -> None:
    scorer = fixture_envs / "counter" / "scoring" / "score.py"
    old, new = SCORER_FIX
    assert old in scorer.read_text()
    scorer.write_text(scorer.read_text().replace(old, new, 1))


def test_the_best_of_the_calls_rescored_counts_not_the_final_solution(fixture_envs: Path, tmp_path: Path,
                                                                      db_path: Path) -> None:
    """Calls 9 (A), invalid, 6 (B), 6 (B again), 3 (C, the final solution); then a scorer fix makes A
    invalid. Re-scored now, the attempt's best call is B's (6), not A's and not the final solution's (3)."""
    env = attempt(fixture_envs, tmp_path, db_path, [
        write("tuned 9 5"), {"score": {}}, write("crash"), {"score": {}}, write("tuned 6 4"), {"score": {}},
        {"score": {}}, write("tuned 3 2"), {"score": {}}, {"submit": None}], "heldout")
    assert rows(db_path, "select final_raw, final_rule from attempts") == [(9.0, "best")]
    fix_the_scorer(fixture_envs)
    result = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rescored"] == {"1": pytest.approx(0.5)}  # (6 - 1) / (11 - 1)
    assert "each valid score call's snapshot (3 distinct)" in " ".join(result.stderr.split())
    (rule, raw, heldout, scores, skipped), = rows(db_path, "select rule, final_raw, heldout_raw, scores, "
                                                           "skipped_snapshots from rescores")
    assert (rule, raw, heldout, json.loads(skipped)) == ("best", 6.0, 5.0, [])
    # each valid call's solution once (B's two calls are one content; the invalid call's is not), then
    # the held-out final on the best call's solution, as the attempt's own held-out final took it
    assert [(c["kind"], Path(c["snapshot"]).name, c["raw"]) for c in json.loads(scores)] == [
        ("rescore", "score-001", None), ("rescore", "score-003", 6.0), ("rescore", "score-005", 3.0),
        ("heldout", "score-001", 5.0)]  # (score-004 was the same as score-003, so it was not kept)
    shown = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    assert "rescore run 1" in shown and "raw 6.0000 (original 9.0000), normalized 0.500 (original 0.800)" in shown
    assert "the best of the score calls' solutions re-scored (3; best rule)" in shown
    options = ("--budgets", "2m", "--at", "2m", "--n-bootstrap", "20", "--db", str(db_path))
    (row,) = [r for r in json.loads(run_cli("report", "--json", "--rescored", "1", *options, env=env).stdout)
              if r["environment"] == "counter"]
    assert (row["mean"], row["original_mean"], row["heldout_mean"]) == pytest.approx((0.5, 0.8, 0.2))
    # a run killed before the attempt's row was written: the same command finishes it, with the same number
    with sqlite3.connect(db_path) as connection:
        connection.execute("delete from rescores")
        connection.execute("update rescore_runs set status = 'running', pid = null, finished_at = null")
    again = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), "--json", env=env)
    assert again.returncode == 0, again.stderr
    outcome = json.loads(again.stdout)
    assert (outcome["run_id"], outcome["resumed"], outcome["rescored"]) == (1, True, {"1": pytest.approx(0.5)})
    assert rows(db_path, "select run_id, rule, final_raw from rescores") == [(1, "best", 6.0)]
    assert rows(db_path, "select status from rescore_runs") == [("done",)]


def test_a_call_snapshot_cut_by_the_budget_is_skipped_with_the_reason(fixture_envs: Path, tmp_path: Path,
                                                                      db_path: Path) -> None:
    env = attempt(fixture_envs, tmp_path, db_path, [
        write("tuned 9 5"), {"write_file": {"path": "pad.bin", "content": "x" * 4000}}, {"score": {}},
        write("tuned 6 4"), {"write_file": {"path": "pad.bin", "content": ""}}, {"score": {}},
        write("tuned 3 2"), {"score": {}}, {"submit": None}], "heldout", max_bytes=1000)
    result = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert result.returncode == 0, result.stderr
    (rule, raw, scores, skipped), = rows(db_path, "select rule, final_raw, scores, skipped_snapshots from rescores")
    assert (rule, raw) == ("best", 6.0)
    assert [Path(c["snapshot"]).name for c in json.loads(scores) if c["kind"] == "rescore"] == [
        "score-002", "score-003"]
    (cut,) = json.loads(skipped)
    assert cut.startswith("score call 1 (9): its snapshot") and "score-001 was cut by the snapshot budget" in cut
    shown = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    assert cut in shown
    # a call's snapshot rewritten since it was taken is refused, as rescore_best's candidates are
    kept = Path(json.loads(scores)[0]["snapshot"])
    (kept / "value.txt").write_text("1000")
    again = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert again.returncode != 0 and "changed since it was taken" in " ".join(again.stderr.split())
    assert rows(db_path, "select count(*) from rescores") == [(1,)]


def test_without_call_snapshots_the_final_solution_is_rescored_and_it_says_so(fixture_envs: Path, tmp_path: Path,
                                                                               db_path: Path) -> None:
    """The `tiny` profile (best, no held-out split) keeps no snapshot at score calls."""
    env = attempt(fixture_envs, tmp_path, db_path, [write("9"), {"score": {}}, write("3"), {"score": {}},
                                                    {"submit": None}], "tiny")
    result = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert result.returncode == 0, result.stderr
    (rule, raw, skipped), = rows(db_path, "select rule, final_raw, skipped_snapshots from rescores")
    assert (rule, raw) == ("final", 3.0)
    (note,) = json.loads(skipped)
    assert "not the best call's" in note and "no snapshots at score calls" in note
    assert note in " ".join(result.stderr.split())
    shown = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    assert "the final solution re-scored" in shown and note in shown
