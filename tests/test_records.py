"""Typed records and the event recorder: real SQLite files, a real harness process for the kill test."""

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
from sqlalchemy import select
from sqlalchemy.exc import StatementError

from rebench.agents.base import AgentConfig
from rebench.clock import AttemptClock
from rebench.context import FLUSH_INTERVAL_S, AttemptRecorder
from rebench.scoring.result import ScoreResult
from rebench.store.db import Store, integrity_ok
from rebench.store.events import Bash, EventKind, EventSchemaError, ModelCall, parse_event, validate_event
from rebench.store.models import Attempt, AttemptStatus, ErrorSource, Event, ScoreKind
from tests.scratch_context import ScratchContext

from .conftest import REPO, run_main


def new_attempt(store: Store) -> int:
    with store.session() as session:
        attempt = Attempt(environment="counter", agent="test", model=None, budget_s=60, status=AttemptStatus.RUNNING)
        session.add(attempt)
        session.flush()
        return attempt.id


def committed(db: Path, query: str) -> list[tuple]:
    """What another connection (another process) sees: only committed rows."""
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def test_unknown_kinds_and_bad_payloads_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    recorder = AttemptRecorder(store, new_attempt(store), AttemptClock())
    with pytest.raises(EventSchemaError, match="unknown event kind 'bash_v2'"):
        recorder.event("bash_v2", command="ls", timeout=None)
    with pytest.raises(EventSchemaError, match="event 'bash' \\(write\\): command: Field required"):
        recorder.event("bash", timeout=None, exit_code=0)
    with pytest.raises(EventSchemaError, match="event 'submit' \\(write\\): answr: Extra inputs"):
        recorder.event("submit", answer=None, answr="x")
    with pytest.raises(EventSchemaError, match="which: Input should be"):
        recorder.event("limit", which="patience", detail="ran out")
    ctx = ScratchContext(tmp_path / "scratch", AgentConfig(name="modular"))
    with pytest.raises(EventSchemaError, match="unknown event kind 'my_agent_thought'"):
        ctx.log_event("my_agent_thought", text="hmm")
    ctx.log_event("note", message="an agent's own note", data={"thought": "hmm"})
    recorder.close()
    assert committed(store.path, "select count(*) from events") == [(0,)]
    assert ctx.kinds() == ["note"]


def test_stored_events_carry_their_version_and_parse_back_typed(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    recorder = AttemptRecorder(store, new_attempt(store), AttemptClock())
    recorder.event("bash", 0.01, command="true", timeout=None, exit_code=0, timed_out=False, stdout="", stderr="")
    recorder.event("bash", 0.5, command="sleep 9", timeout=None, cancelled=True)
    recorder.close()
    with store.session() as session:
        rows = [(e.kind, e.data) for e in session.scalars(select(Event).order_by(Event.seq))]
    assert rows[1] == ("bash", {"v": 1, "command": "sleep 9", "timeout": None, "cancelled": True})
    parsed = [parse_event(kind, data) for kind, data in rows]
    assert all(isinstance(p, Bash) for p in parsed)
    assert [(p.exit_code, p.cancelled) for p in parsed if isinstance(p, Bash)] == [(0, False), (None, True)]
    # rows written before payloads had versions are version 1; a payload that drifted does not parse
    assert parse_event("model_call", {"model": "m", "input_tokens": 1, "output_tokens": 2, "cached_tokens": 0,
                                      "cost_usd": 0.0, "wait_s": 0.1}).v == 1
    assert isinstance(parse_event("model_call", validate_event("model_call", {
        "model": "m", "input_tokens": 1, "output_tokens": 2, "cached_tokens": 0, "cost_usd": 0.0, "wait_s": 0.1,
        "turn": 3})), ModelCall)
    with pytest.raises(EventSchemaError, match="event 'model_call' \\(read\\): input_tokens: Field required"):
        parse_event("model_call", {"model": "m", "output_tokens": 2, "cached_tokens": 0, "cost_usd": 0.0,
                                   "wait_s": 0.1})
    with pytest.raises(EventSchemaError, match="v: Input should be 1"):
        parse_event("submit", {"v": 2, "answer": None})


def test_status_columns_take_only_their_values_and_read_back_as_enums(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    attempt_id = new_attempt(store)
    bad_status = pytest.raises(StatementError, match="invalid AttemptStatus 'finished'; allowed: queued, running")
    with bad_status, store.session() as session:
        session.get_one(Attempt, attempt_id).status = "finished"  # type: ignore[assignment]
    with pytest.raises(StatementError, match="invalid ErrorSource 'gremlins'"), store.session() as session:
        session.add(Attempt(environment="counter", agent="test", budget_s=60, error_source="gremlins"))
    assert committed(store.path, "select id, status, error_source from attempts") == [(attempt_id, "running", None)]
    with store.session() as session:
        row = session.get_one(Attempt, attempt_id)
        assert row.status is AttemptStatus.RUNNING and row.error_source is None


def test_a_score_is_committed_with_every_earlier_event_before_it_returns(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    recorder = AttemptRecorder(store, new_attempt(store), AttemptClock(), flush_interval_s=3600)
    for i in range(5):
        recorder.event("sleep", seconds=float(i))
    recorder.score(ScoreResult(raw=2.0), ScoreKind.INTERMEDIATE)
    assert committed(store.path, "select kind, raw from score_events") == [("intermediate", 2.0)]
    assert committed(store.path, "select seq from events order by seq") == [(i,) for i in range(1, 6)]
    recorder.event("submit", answer=None)
    recorder.close()
    assert committed(store.path, "select max(seq) from events") == [(6,)]


def test_replay_attempt_records_typed_events_and_json_statuses(
    fixture_envs: Path, tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"bash": "echo hi"}, {"python": "print(1)"}, {"write_file": {"path": "value.txt", "content": "4"}},
        {"score": {}}, {"sleep": 0.01}, {"submit": "done"}]}))
    code, _, err = run_main(["run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}",
                             "--profile", "tiny", "--budget", "1m", "--backend", "local", "--db", str(db_path)],
                            capsys)
    assert code == 0, err
    code, out, _ = run_main(["attempts", "show", "1", "--json", "--db", str(db_path)], capsys)
    shown = json.loads(out)
    assert shown["status"] == AttemptStatus.DONE and shown["error_source"] is None
    events = [parse_event(e["kind"], e["data"]) for e in shown["events"]]
    assert [e.kind for e in events] == ["start", "bash", "python", "write_file", "score", "sleep", "submit",
                                        "snapshot"]
    assert {e["kind"] for e in shown["events"]} <= set(EventKind)
    assert [s["kind"] for s in shown["scores"]] == [ScoreKind.BASELINE, ScoreKind.INTERMEDIATE]
    code, out, _ = run_main(["attempts", "list", "--json", "--db", str(db_path)], capsys)
    assert [row["status"] for row in json.loads(out)] == ["done"]
    code, _, err = run_main(["attempts", "list", "--status", "finished", "--db", str(db_path)], capsys)
    assert code == 2 and "invalid --status 'finished'; allowed: queued, running, done" in err
    assert ErrorSource.AGENT == "agent"  # the enums are plain strings wherever JSON is written


@pytest.mark.slow
@pytest.mark.alone  # the 100 ms bound is a wall-clock figure: a loaded machine delays the writer thread
def test_sigkill_of_the_harness_loses_at_most_the_last_100_ms_of_events(tmp_path: Path) -> None:
    """SIGKILL a real harness process making tool calls: the database is intact, every score it
    reported is there, and so is every event recorded more than 100 ms before the kill."""
    db = tmp_path / "kill.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.recording_driver", str(db), str(tmp_path / "sandbox")],
                            stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    assert proc.stdout is not None
    lines = []
    while len(lines) < 150:  # well past the two scores, and many flush intervals
        line = proc.stdout.readline()
        assert line, f"the driver stopped early (exit {proc.poll()})"
        lines.append(line.split())
    killed_at = time.time()
    os.kill(proc.pid, signal.SIGKILL)
    lines += [line.split() for line in proc.stdout.read().splitlines()]
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert integrity_ok(db)
    events = [(int(n), float(t)) for word, n, t in (x for x in lines if x[0] == "event")]
    scores = [int(x[1]) for x in lines if x[0] == "score"]
    stored = [seq for (seq,) in committed(db, "select seq from events order by seq")]
    assert stored == list(range(1, len(stored) + 1))  # a prefix: nothing in the middle lost
    older = [n for n, t in events if t <= killed_at - 0.1]
    assert older and max(older) <= len(stored), (max(older), len(stored), FLUSH_INTERVAL_S)
    assert older and older[-1] >= 40  # the writer thread, not a score, committed these
    assert scores == [10, 20] and committed(db, "select raw from score_events") == [(10.0,), (20.0,)]


def test_close_commits_what_is_buffered_and_the_writer_thread_ends(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    recorder = AttemptRecorder(store, new_attempt(store), AttemptClock(), flush_interval_s=3600)
    recorder.event("score_log", entries=0)
    assert committed(store.path, "select count(*) from events") == [(0,)]  # buffered, not yet written
    recorder.close()
    assert committed(store.path, "select kind from events") == [("score_log",)]
    assert not recorder._writer.running


def test_an_exit_without_close_still_commits_buffered_events(tmp_path: Path) -> None:
    """A harness that exits on an uncaught error never reaches the runner's close(): atexit commits."""
    db = tmp_path / "exit.db"
    code = (
        "import sys\n"
        "from rebench.clock import AttemptClock\n"
        "from rebench.context import AttemptRecorder\n"
        "from rebench.store.db import Store\n"
        "from tests.test_records import new_attempt\n"
        "store = Store(sys.argv[1])\n"
        "recorder = AttemptRecorder(store, new_attempt(store), AttemptClock(), flush_interval_s=3600)\n"
        "for i in range(5):\n"
        "    recorder.event('sleep', seconds=float(i))\n"
        "raise RuntimeError('the harness failed')\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert result.returncode == 1 and "the harness failed" in result.stderr
    assert committed(db, "select seq, data from events order by seq") == [
        (i + 1, json.dumps({"v": 1, "seconds": float(i)})) for i in range(5)]


def test_the_attempts_of_one_store_share_one_writer_and_one_transaction_per_batch(tmp_path: Path) -> None:
    """Eight attempts recording at once: one writer thread for the store (not eight), and what they
    buffered between two commits goes in one transaction, every attempt's rows in its own order."""
    import threading

    from sqlalchemy import event as sa_event
    from sqlalchemy.orm import Session

    store = Store(tmp_path / "shared.db")
    before = {t for t in threading.enumerate() if t.name == "rebench-events"}
    recorders = [AttemptRecorder(store, new_attempt(store), AttemptClock(), flush_interval_s=3600) for _ in range(8)]
    writers = {t for t in threading.enumerate() if t.name == "rebench-events"} - before
    assert len(writers) == 1
    commits: list[int] = []

    def counted(session: Session) -> None:
        commits.append(1)

    sa_event.listen(Session, "after_commit", counted)
    try:
        for i in range(5):
            for recorder in recorders:
                recorder.event("sleep", seconds=float(i))
        assert committed(store.path, "select count(*) from events") == [(0,)]
        recorders[0].flush()  # one attempt's flush commits every attempt's rows, in one transaction
        assert len(commits) == 1
    finally:
        sa_event.remove(Session, "after_commit", counted)
    assert committed(store.path, "select count(*) from events") == [(40,)]
    for recorder in recorders:
        rows = committed(store.path, f"select seq, data from events where attempt_id = {recorder.attempt_id} "
                                     "order by id")
        assert rows == [(i + 1, json.dumps({"v": 1, "seconds": float(i)})) for i in range(5)]
    for recorder in recorders:
        recorder.close()
    assert not recorders[0]._writer.running


def test_a_model_calls_event_and_its_usage_totals_are_written_together(tmp_path: Path) -> None:
    """The call's event and the attempt's totals are one transaction, after the call returns (no commit
    on the caller's path); the totals the limits read are right before it."""
    from rebench.agents.base import ModelUsage

    store = Store(tmp_path / "usage.db")
    attempt_id = new_attempt(store)
    recorder = AttemptRecorder(store, attempt_id, AttemptClock(), flush_interval_s=3600)
    totals = None
    for _ in range(3):
        totals = recorder.model_call(ModelUsage(model="m", input_tokens=10, output_tokens=5, cost_usd=0.25, wait_s=0.1),
                                     text="hi", tool_calls=[], turn=1)
    assert totals is not None and (totals.input_tokens, totals.output_tokens, totals.cost_usd) == (30, 15, 0.75)
    assert committed(store.path, "select input_tokens, cost_usd from attempts") == [(0, 0.0)]
    assert committed(store.path, "select count(*) from events") == [(0,)]
    recorder.flush()
    assert committed(store.path, "select input_tokens, output_tokens, cost_usd from attempts") == [(30, 15, 0.75)]
    assert committed(store.path, "select count(*) from events where kind = 'model_call'") == [(3,)]
    recorder.close()


def test_a_recorder_opened_while_the_last_one_closes_still_gets_a_writer(tmp_path: Path) -> None:
    """The store's writer thread stops when its last recorder closes; a recorder opened at that same
    moment (another thread) must still have its events committed in the background, not only at a flush."""
    import threading

    store = Store(tmp_path / "race.db")
    attempts = [new_attempt(store) for _ in range(2)]
    for round_ in range(100):
        first = AttemptRecorder(store, attempts[0], AttemptClock(), flush_interval_s=0.005)
        opened: list[AttemptRecorder] = []
        opener = threading.Thread(target=lambda into=opened: into.append(
            AttemptRecorder(store, attempts[1], AttemptClock(), flush_interval_s=0.005)))
        opener.start()
        first.close()
        opener.join()
        second = opened[0]
        assert second._writer.running, f"round {round_}: no writer thread for the open recorder"
        second.event("sleep", seconds=float(round_))
        deadline = time.monotonic() + 5
        while committed(store.path, f"select count(*) from events where attempt_id = {attempts[1]}") != [
                (round_ + 1,)] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert committed(store.path, f"select count(*) from events where attempt_id = {attempts[1]}") == [
            (round_ + 1,)], f"round {round_}: the event was not committed in the background"
        second.close()
        assert not second._writer.running
