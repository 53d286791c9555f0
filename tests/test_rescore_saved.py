"""`rebench rescore`: saved attempts re-scored through the real CLI, local backend, real SQLite, on the
`counter` fixture (its scorer reads value.txt; `cycle A B ...` gives the n-th value on the n-th call
of a sandbox, `V/S` after sleeping S seconds)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, run_cli, run_main

pytestmark = pytest.mark.slow
ORIGINAL_TABLES = ("attempts", "score_events", "events", "pauses", "campaigns")


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def dump(db: Path) -> dict[str, list[tuple]]:
    return {table: rows(db, f"select * from {table} order by id") for table in ORIGINAL_TABLES}


def campaign(tmp_path: Path, db: Path, envs: Path, actions: list, *extra: str) -> None:
    script = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    result = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--budget", "2m", "--backend", "local", "--db", str(db), "--no-calibrate", *extra,
                     env={"REBENCH_ENVIRONMENTS": str(envs)})
    assert result.returncode == 0, result.stderr


def rescore(db: Path, envs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("rescore", *args, "--backend", "local", "--db", str(db), env={"REBENCH_ENVIRONMENTS": str(envs)})


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_rescore_a_campaign_after_its_anchors_and_scorer_changed(fixture_envs: Path, tmp_path: Path,
                                                                db_path: Path) -> None:
    campaign(tmp_path, db_path, fixture_envs, [{"write_file": {"path": "value.txt", "content": "5"}},
                                               {"score": {}}, {"submit": None}], "-k", "2")
    before = dump(db_path)
    # the environment changes: anchors re-measured, and a scorer fix that adds one
    toml = fixture_envs / "counter" / "environment.toml"
    edit(toml, 'reference = 11.0, source = "by construction" }', 'reference = 21.0, source = "re-measured" }')
    edit(fixture_envs / "counter" / "scoring" / "score.py", "value = float(text)", "value = float(text) + 1")
    result = rescore(db_path, fixture_envs, "--campaign", "1", "--json", "--parallel", "2")
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["rescored"] == {"1": pytest.approx(0.25), "2": pytest.approx(0.25)} and not outcome["skipped"]
    # new rows, what made them recorded; the original rows untouched
    assert dump(db_path) == before
    assert rows(db_path, "select run_id, attempt_id, status, rule, final_raw, anchors_start, anchors_reference, "
                         "anchors_kind from rescores order by attempt_id") == [
        (1, 1, "done", "final", 6.0, 1.0, 21.0, "declared"), (1, 2, "done", "final", 6.0, 1.0, 21.0, "declared")]
    (environments, status, attempt_ids), = rows(db_path, "select environments, status, attempt_ids from rescore_runs")
    recorded = json.loads(environments)["counter/tiny"]
    assert (status, json.loads(attempt_ids)) == ("done", [1, 2])
    assert recorded["anchors"]["reference"] == 21.0 and recorded["version"] == "1.0.0" and recorded["content_hash"]
    # attempts show: the original final (as recorded, with the anchors of its day) beside the re-score
    shown = json.loads(run_cli("attempts", "show", "1", "--json", "--db", str(db_path)).stdout)
    assert (shown["final_raw"], shown["normalized"]) == (5.0, pytest.approx(0.4))
    assert [(r["run"], r["raw"], r["normalized"]) for r in shown["rescores"]] == [(1, 6.0, pytest.approx(0.25))]
    text = run_cli("attempts", "show", "1", "--db", str(db_path)).stdout
    assert "rescore run 1" in " ".join(text.split()) and "(original 0.400)" in " ".join(text.split())
    # the report counts either: the original scores (with the anchors in force), or run 1's beside them
    options = ("--budgets", "2m", "--at", "2m", "--n-bootstrap", "20", "--db", str(db_path),)
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    plain = json.loads(run_cli("report", "--json", *options, env=env).stdout)
    both = json.loads(run_cli("report", "--json", "--rescored", "1", *options, env=env).stdout)
    assert (plain[0]["mean"], plain[0]["original_mean"]) == (pytest.approx(0.2), None)
    assert (both[0]["mean"], both[0]["original_mean"]) == (pytest.approx(0.25), pytest.approx(0.2))
    table = " ".join(run_cli("report", "--rescored", "1", *options, env=env).stdout.split())
    assert "0.250 (original 0.200)" in table and "re-scored by rescore run 1" in table


def test_window_anchors_are_measured_again_beside_the_snapshots(fixture_envs: Path, tmp_path: Path,
                                                                db_path: Path) -> None:
    """A timing profile under rescore_best: the snapshots its re-scoring used are scored again in a fresh
    sandbox, in rounds with the starting and reference solutions, whose medians normalize the re-score."""
    campaign(tmp_path, db_path, fixture_envs, [
        {"write_file": {"path": "value.txt", "content": "cycle 9 2 6 7"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "cycle 8 7 7 7"}}, {"score": {}}, {"submit": None}],
        "--profile", "rescore")
    edit(fixture_envs / "counter" / "environment.toml", 'reference = 11.0, source = "by construction" }\n'
         'params = { secret_file = "answer.txt" }\n', 'reference = 31.0, source = "declared" }\n'
         'params = { secret_file = "answer.txt" }\n')
    result = rescore(db_path, fixture_envs, "--attempt", "1")
    assert result.returncode == 0, result.stderr
    (raw, normalized, kind, rule, scores), = rows(db_path, "select final_raw, final_normalized, anchors_kind, rule, "
                                                           "scores from rescores")
    calls = json.loads(scores)
    assert [c["kind"] for c in calls] == ["anchor_start", "anchor_reference", "rescore", "rescore"] * 3
    # a fresh sandbox counts each text's calls from the start: 9 2 6 (median 6) and 8 7 7 (median 7)
    assert [c["raw"] for c in calls if c["kind"] == "rescore"] == [9, 8, 2, 7, 6, 7]
    assert (raw, kind, rule, normalized) == (7.0, "window", "rescore_best", pytest.approx(0.6))


def test_cut_snapshots_and_unfinished_attempts_are_listed_and_skipped(fixture_envs: Path, tmp_path: Path,
                                                                     db_path: Path) -> None:
    edit(fixture_envs / "counter" / "environment.toml", "[profiles.lower]",
         '[profiles.capped]\nresources = { gpus = 0, cpus = 1, memory_gb = 1 }\ndirection = "higher"\n'
         'final_score = "best"\nscore_timeout_s = 5\nsnapshot = { max_bytes = 64 }\n'
         'anchors = { start = 1.0, reference = 11.0, source = "by construction" }\n'
         'params = { secret_file = "answer.txt" }\n\n[profiles.lower]')
    actions = [{"write_file": {"path": "value.txt", "content": "4"}}, {"score": {}}]
    campaign(tmp_path, db_path, fixture_envs, [*actions, {"submit": None}])
    campaign(tmp_path, db_path, fixture_envs, [*actions, {"write_file": {"path": "big.txt", "content": "x" * 200}},
                                               {"submit": None}], "--profile", "capped")
    with sqlite3.connect(db_path) as connection:  # as a harness that died leaves it
        connection.execute("insert into attempts (campaign_id, source, environment, env_version, profile, agent, "
                           "budget_s, seed, status, counted, created_at, wall_s, working_s, model_wait_s, "
                           "input_tokens, output_tokens, cached_tokens, cost_usd, submitted, network) values "
                           "(2, 'own', 'counter', '1.0.0', 'tiny', 'replay', 60, 0, 'interrupted', 1, "
                           "'2026-01-01', 0, 0, 0, 0, 0, 0, 0, 0, 'none')")
    result = rescore(db_path, fixture_envs, "--env", "counter")
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select attempt_id, status from rescores order by attempt_id") == [
        (1, "done"), (2, "skipped"), (3, "skipped")]
    (cut,), (unfinished,) = rows(db_path, "select reason from rescores where status = 'skipped' order by attempt_id")
    assert "cut by the snapshot budget" in cut and "not finished (status interrupted)" in unfinished
    out = " ".join(result.stdout.split())
    assert "skipped attempt 2: its final snapshot was cut by the snapshot budget" in out
    # only the cut one asked for: nothing to re-score, nothing written
    again = rescore(db_path, fixture_envs, "--attempt", "2")
    assert again.returncode != 0 and "nothing to re-score: attempt 2: its final snapshot was cut" in again.stderr
    assert rows(db_path, "select count(*) from rescore_runs") == [(1,)]


def test_bad_input_is_one_line_and_writes_nothing(fixture_envs: Path, tmp_path: Path, db_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    campaign(tmp_path, db_path, fixture_envs, [{"write_file": {"path": "value.txt", "content": "4"}},
                                               {"score": {}}, {"submit": None}])
    before = db_path.read_bytes()
    cases = [
        (("--attempt", "9"), "no attempt with id 9"),
        (("--campaign", "4"), "no campaign 4 in this database; campaigns there: 1"),
        (("--env", "nope"), "unknown environment 'nope'; allowed:"),
        (("--env", "gateway_echo"), "nothing to re-score: no attempts of environment(s) gateway_echo"),
        ((), "give exactly one of --attempt ID"),
        (("--attempt", "1", "--campaign", "1"), "give exactly one of --attempt ID"),
        (("--attempt", "1", "--parallel", "0"), "invalid --parallel 0"),
    ]
    for args, message in cases:
        code, _, err = run_main(["rescore", *args, "--backend", "local", "--db", str(db_path)], capsys)
        assert code != 0 and message in " ".join(err.split()), (args, err)
        assert len(err.strip().splitlines()) == 1, err
    assert rows(db_path, "select count(*) from rescore_runs") == [(0,)] and db_path.read_bytes() == before
    code, _, _ = run_main(["rescore", "--attempt", "1", "--db", str(tmp_path / "none.db")], capsys)
    assert code != 0 and not (tmp_path / "none.db").exists()
    code, _, err = run_main(["report", "--rescored", "3", "--db", str(db_path)], capsys)
    assert code != 0 and "no rescore run 3 in this database; runs there: none" in " ".join(err.split())


def test_a_killed_rescore_is_finished_by_the_next_call_without_duplicates(fixture_envs: Path, tmp_path: Path,
                                                                         db_path: Path) -> None:
    campaign(tmp_path, db_path, fixture_envs, [{"write_file": {"path": "value.txt", "content": "cycle 3/1"}},
                                               {"score": {}}, {"submit": None}], "-k", "3")
    proc = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "rescore", "--campaign", "1", "--backend",
                             "local", "--db", str(db_path)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "REBENCH_ENVIRONMENTS": str(fixture_envs)})
    deadline = time.monotonic() + 60
    first: list[tuple] = []
    while time.monotonic() < deadline and not first:
        time.sleep(0.05)
        with contextlib.suppress(sqlite3.OperationalError):  # the tables are not there yet
            first = rows(db_path, "select id, attempt_id from rescores")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert first, "no attempt was re-scored within a minute"
    done = rows(db_path, "select id, attempt_id from rescores")
    assert len(done) < 3 and rows(db_path, "select status from rescore_runs") == [("running",)]
    again = run_cli("rescore", "--campaign", "1", "--backend", "local", "--db", str(db_path), "--json",
                    env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert again.returncode == 0, again.stderr
    outcome = json.loads(again.stdout)
    assert outcome["resumed"] and outcome["run_id"] == 1 and sorted(outcome["already"]) == [a for _, a in done]
    assert rows(db_path, "select count(*), count(distinct attempt_id), min(final_raw), max(final_raw) "
                         "from rescores") == [(3, 3, 3.0, 3.0)]
    assert set(done) <= set(rows(db_path, "select id, attempt_id from rescores"))  # the first rows stay as written
    assert rows(db_path, "select id, status from rescore_runs") == [(1, "done")]


@pytest.mark.docker
def test_rescore_on_the_docker_backend(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    """Attempts run on the local backend, re-scored in fresh containers: the snapshots travel into them."""
    from .docker_support import base_image, docker_engine

    base_image(docker_engine())
    campaign(tmp_path, db_path, fixture_envs, [
        {"write_file": {"path": "value.txt", "content": "cycle 9 2 6 7"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "cycle 8 7 7 7"}}, {"score": {}}, {"submit": None}],
        "--profile", "rescore")
    result = run_cli("rescore", "--campaign", "1", "--backend", "docker", "--db", str(db_path),
                     env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert result.returncode == 0, result.stderr
    (raw, kind, backend), = rows(db_path, "select final_raw, anchors_kind, backend from rescores "
                                          "join rescore_runs on rescore_runs.id = rescores.run_id")
    assert (raw, kind, backend) == (7.0, "window", "docker")
