"""End-to-end attempts through the real CLI, local backend, real SQLite, on the dependency-free
`counter` fixture environment (score = the number in value.txt)."""

from __future__ import annotations

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

from rebench.store.db import Store, integrity_ok

from .conftest import REPO, interruptible, run_cli, run_main


def script(tmp_path: Path, actions: list, name: str = "script.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"actions": actions}))
    return path


def table_counts(db: Path) -> dict[str, int]:
    """Rows per table: what a rejected command must leave unchanged."""
    with sqlite3.connect(db) as connection:
        tables = [name for (name,) in connection.execute("select name from sqlite_master where type = 'table'")]
        return {table: connection.execute(f'select count(*) from "{table}"').fetchone()[0] for table in tables}


def rows(db: Path, query: str, *args: object) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query, args).fetchall()


def replay(tmp_path: Path, db: Path, actions: list, *extra: str, budget: str = "2m", profile: str = "tiny",
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = script(tmp_path, actions)
    return run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={path}",
                   "--profile", profile, "--budget", budget, "--backend", "local", "--db", str(db), *extra,
                   env={"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"], **(env or {})})


def test_reference_agent_scores_one_and_report_shows_it(fixture_envs: Path, db_path: Path) -> None:
    result = run_cli("run", "--env", "counter", "--agent", "reference", "--budget", "1m", "-k", "2",
                     "--backend", "local", "--db", str(db_path), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert result.returncode == 0, result.stderr
    assert "does not isolate the agent" in result.stderr
    attempts = rows(db_path, "select status, final_raw, final_normalized, submitted from attempts")
    assert attempts == [("done", 11.0, 1.0, 1), ("done", 11.0, 1.0, 1)]
    baseline = rows(db_path, "select raw from score_events where kind = 'baseline'")
    assert baseline == [(1.0,), (1.0,)]
    report = run_cli("report", "--json", "--db", str(db_path), env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    data = json.loads(report.stdout)
    assert data[0]["environment"] == "counter" and data[0]["n"] == 2 and data[0]["mean"] == 1.0
    listed = json.loads(run_cli("attempts", "list", "--json", "--db", str(db_path)).stdout)
    assert {a["status"] for a in listed} == {"done"} and len(listed) == 2
    snapshot = Path(listed[0]["id"] and rows(db_path, "select snapshot_path from attempts")[0][0])
    assert (snapshot / "value.txt").read_text().strip() == "11"


def test_best_valid_score_counts_and_baseline_is_paused(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    actions = [
        {"write_file": {"path": "value.txt", "content": "6"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "oops"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "3"}}, {"score": {}},
        {"submit": None},
    ]
    result = replay(tmp_path, db_path, actions)
    assert result.returncode == 0, result.stderr
    (status, final_raw, normalized, working, wall), = rows(
        db_path, "select status, final_raw, final_normalized, working_s, wall_s from attempts")
    assert (status, final_raw) == ("done", 6.0)
    assert normalized == pytest.approx(0.5)
    assert rows(db_path, "select valid from score_events where kind='intermediate' order by id") == [(1,), (0,), (1,)]
    assert rows(db_path, "select reason from pauses") == [("setup",)]
    assert working < wall


def test_last_rule_and_hidden_score(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    actions = [
        {"write_file": {"path": "value.txt", "content": "0.5"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "0.75"}}, {"score": {}},
        {"submit": None},
    ]
    result = replay(tmp_path, db_path, actions, profile="lower")
    assert result.returncode == 0, result.stderr
    assert rows(db_path, "select final_raw from attempts") == [(0.75,)]
    feedback = [json.loads(r[0]) for r in rows(db_path, "select data from events where kind = 'score'")]
    assert feedback and all("score" not in f["feedback"] and f["feedback"]["valid"] for f in feedback)


@pytest.mark.slow
@pytest.mark.parametrize("blocker", ["sleep", "bash"])
def test_budget_is_enforced_by_a_hard_timer(fixture_envs: Path, tmp_path: Path, db_path: Path, blocker: str) -> None:
    """The agent is stopped within 2 s of its budget even while blocked inside a long call."""
    marker = f"sleep 987.{os.getpid()}"  # this run's own: another test run's leftover is not this one's
    wait = {"sleep": 120} if blocker == "sleep" else {"bash": marker}
    actions = [{"write_file": {"path": "value.txt", "content": "9"}}, {"score": {}},
               {"write_file": {"path": "value.txt", "content": "2"}}, {"score": {}}, wait]
    result = replay(tmp_path, db_path, actions, budget="4s")
    assert result.returncode == 0, result.stderr
    (status, reason, working, final_raw), = rows(
        db_path, "select status, limit_reason, working_s, final_raw from attempts")
    assert (status, reason, final_raw) == ("limit", "time", 9.0)
    assert 4.0 <= working <= 6.0
    (limit_at,), = rows(db_path, "select working_s from events where kind = 'limit'")
    assert 4.0 <= limit_at <= 6.0
    if blocker == "bash":
        leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True)
        assert leftover.returncode == 1, "the agent's command outlived its budget"


@pytest.mark.slow
def test_sigint_marks_interrupted_keeps_scores_and_kills_processes(
        fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    path = script(tmp_path, [
        {"write_file": {"path": "value.txt", "content": "4"}}, {"score": {}},
        {"bash": "(sleep 876.5 &) ; setsid sleep 876.5 & sleep 876.5"},
    ])
    proc = subprocess.Popen(
        [sys.executable, "-m", "rebench.cli.app", "run", "--env", "counter", "--agent", "replay",
         "--agent-arg", f"script={path}", "--budget", "10m", "-k", "2", "--backend", "local", "--db", str(db_path)],
        env={**os.environ, "REBENCH_ENVIRONMENTS": str(fixture_envs)}, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if rows(db_path, "select count(*) from events where kind = 'score'")[0][0]:
                break
        except sqlite3.OperationalError:  # not created or not migrated yet
            pass
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    statuses = rows(db_path, "select status, error_source from attempts order by id")
    assert statuses == [("interrupted", "user"), ("interrupted", "user")]
    assert rows(db_path, "select raw from score_events where kind = 'intermediate'") == [(4.0,)]
    assert rows(db_path, "select status from campaigns") == [("interrupted",)]
    assert subprocess.run(["pgrep", "-f", "sleep 876.5"], capture_output=True).returncode == 1
    assert integrity_ok(db_path)


def test_agent_error_is_attributed_to_the_agent(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    protected = "/proc/rebench-does-not-exist/x"
    result = replay(tmp_path, db_path, [{"write_file": {"path": protected, "content": "x"}}])
    assert result.returncode == 0, result.stderr
    (status, source, message), = rows(db_path, "select status, error_source, error_message from attempts")
    assert (status, source) == ("error", "agent") and "rebench-does-not-exist" in message


def test_provider_keys_do_not_reach_the_sandbox(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    secret = "sk-test-should-never-leak-123"
    result = replay(tmp_path, db_path, [{"bash": "env > env.txt"}, {"submit": None}],
                    env={"OPENAI_API_KEY": secret, "ANTHROPIC_API_KEY": secret})
    assert result.returncode == 0, result.stderr
    (snapshot,), = rows(db_path, "select snapshot_path from attempts")
    dumped = (Path(snapshot) / "env.txt").read_text()
    assert "PATH=" in dumped and secret not in dumped
    assert secret.encode() not in db_path.read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "30"], "invalid duration '30'"),
        (["--budget", "1m", "-k", "0"], "invalid -k 0"),
        (["--budget", "1m", "--agent", "nobody"], "unknown agent 'nobody'"),
        (["--budget", "1m", "--profile", "huge"], "no profile 'huge'"),
        (["--budget", "1m", "--env", "counter,nope"], "unknown environment 'nope'"),
        (["--budget", "1m", "--backend", "cloud"], "unknown backend 'cloud'"),
        (["--budget", "1m", "--agent", "replay"], "needs a script"),
        (["--budget", "1m", "--agent", "replay", "--agent-arg", "script=/nonexistent.yaml"], "cannot be read"),
        (["--budget", "1m", "--agent-arg", "repeats=zero"], "repeats='zero' is not allowed"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(fixture_envs: Path, db_path: Path, args: list[str],
                                                  message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """In-process (argument checks need no subprocess), against a database that already exists,
    so that "writes nothing" is checked on every case: no table gains a row."""
    Store(db_path).close()
    before = table_counts(db_path)
    base = {"--env": "counter", "--agent": "reference"}
    for index in range(0, len(args) - 1):
        if args[index] in base:
            base.pop(args[index])
    flat = [item for pair in base.items() for item in pair]
    code, out, err = run_main(["run", *flat, *args, "--backend" if "--backend" not in args else "--seed",
                               "local" if "--backend" not in args else "0", "--db", str(db_path)], capsys)
    assert code == 2, out + err
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1, err
    assert message in lines[0], err
    assert table_counts(db_path) == before
    assert before["attempts"] == before["campaigns"] == 0


def test_replay_script_with_unknown_action_is_rejected(fixture_envs: Path, tmp_path: Path, db_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The error names the script, the position of the bad action, the bad tag and the allowed actions."""
    path = script(tmp_path, [{"write_file": {"path": "value.txt", "content": "1"}}, {"teleport": "mars"}])
    code, _, err = run_main(["run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={path}",
                             "--budget", "1m", "--backend", "local", "--db", str(db_path)], capsys)
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: replay script '{path}': actions.1: "), line
    assert "'teleport'" in line, line
    allowed = line[line.rindex("(actions: "):]
    assert "write_file" in allowed, line
    assert "submit" in allowed, line


def test_attempts_show_replays_events(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    replay(tmp_path, db_path, [{"bash": "echo hello-from-agent"}, {"score": {}}, {"submit": "done"}])
    shown = json.loads(run_cli("attempts", "show", "1", "--json", "--db", str(db_path)).stdout)
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds == ["start", "bash", "score", "submit", "snapshot"]
    assert shown["events"][1]["data"]["stdout"].strip() == "hello-from-agent"
    assert [s["kind"] for s in shown["scores"]] == ["baseline", "intermediate"]
    assert [p["reason"] for p in shown["pauses"]] == ["setup"]  # the baseline score is not working time
    terminal = run_cli("attempts", "show", "1", "--db", str(db_path)).stdout
    assert "Pauses" in terminal and "setup" in terminal, terminal
    missing = run_cli("attempts", "show", "99", "--db", str(db_path))
    assert missing.returncode == 2 and "no attempt with id 99" in missing.stderr
