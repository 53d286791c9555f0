"""A human attempt's `task` commands and its clock, without SSH or Docker: the real AttemptRunner
(local backend, real SQLite, the `counter` fixture environment) runs an agent that calls the
command handler directly, as the container's `task` client would through the exec server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from rebench import api
from rebench.agents.base import AgentConfig, AgentContext
from rebench.context import AttemptContext
from rebench.environments.registry import EnvironmentRegistry
from rebench.human.clock import HARNESS_DOWN, restore_clock, wall_clock
from rebench.human.tasks import TaskCommands
from rebench.runner import AttemptRunner, RunHooks
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Event, HumanState, Pause, ScoreEvent


def _plan(store: Store, budget_s: float = 600.0) -> int:
    with store.session() as session:
        attempt = Attempt(source="own", environment="counter", profile="tiny", agent="human", model=None,
                          budget_s=budget_s, status=AttemptStatus.QUEUED, backend="local")
        session.add(attempt)
        session.flush()
        return attempt.id


class Driver:
    """Plays the expert: a list of (command, args, seconds to wait after) sent to TaskCommands."""

    uses_reference = False

    def __init__(self, steps: list[tuple[str, list[str], float]]) -> None:
        self.steps = steps
        self.replies: list[tuple[str, int, str]] = []
        self.states: list[HumanState] = []

    async def run(self, ctx: AgentContext) -> None:
        assert isinstance(ctx, AttemptContext)
        commands = TaskCommands(ctx, set_state=self.states.append)
        for command, args, wait in self.steps:
            if command == "write":
                await ctx.write_file("value.txt", args[0])
                continue
            code, output = await commands.run(command, args)
            self.replies.append((command, code, output))
            await asyncio.sleep(wait)
        await asyncio.sleep(60)  # `submit` ends the attempt through ctx.submitted, not by returning


def _run(store: Store, driver: Driver, budget_s: float = 600.0) -> int:
    attempt_id = _plan(store, budget_s)
    env = EnvironmentRegistry().get("counter")
    runner = AttemptRunner(store, env, backend="local", snapshots_dir=store.path.parent / "snapshots")
    asyncio.run(runner.run(attempt_id, AgentConfig(name="human"), RunHooks(agent=driver, clock=wall_clock())))
    return attempt_id


@pytest.fixture
def counter_store(fixture_envs: Path, tmp_path: Path) -> Store:
    api.build_environment("counter", "tiny", "local")
    return Store(tmp_path / "human.db")


def test_task_commands_clock_and_scores(counter_store: Store) -> None:
    store = counter_store
    driver = Driver([
        ("score", [], 0), ("pause", ["lunch"], 0), ("bogus", [], 0), ("note", ["reading", "the", "task"], 0),
        ("status", [], 0.6),
        ("start", [], 0.2), ("start", [], 0),
        ("write", ["7"], 0), ("score", [], 0.3),
        ("pause", [], 0), ("pause", ["coffee"], 1.5), ("score", [], 0), ("resume", [], 0.3),
        ("resume", [], 0), ("score-log", [], 0), ("status", [], 0), ("submit", [], 0), ("score", [], 0),
    ])
    attempt_id = _run(store, driver)
    codes = [(c, code) for c, code, _ in driver.replies]
    assert codes == [("score", 1), ("pause", 1), ("bogus", 2), ("note", 0), ("status", 0), ("start", 0),
                     ("start", 1), ("score", 0), ("pause", 2), ("pause", 0), ("score", 1), ("resume", 0),
                     ("resume", 1), ("score-log", 0), ("status", 0), ("submit", 0), ("score", 1)]
    outputs = {c: out for c, _, out in driver.replies}
    assert "run `task start` first" in driver.replies[0][2]
    assert '"score": 7.0' in outputs["score-log"]
    assert "state: working" in outputs["status"] and "scores: 1" in outputs["status"]
    assert driver.states == [HumanState.WORKING, HumanState.ON_BREAK, HumanState.WORKING]
    with store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        pauses = [(p.reason, p.start_s, p.end_s) for p in session.scalars(
            select(Pause).where(Pause.attempt_id == attempt_id).order_by(Pause.id))]
        tasks = [e.data for e in session.scalars(select(Event).where(
            Event.attempt_id == attempt_id, Event.kind == "task").order_by(Event.seq))]
        notes = [e.data["message"] for e in session.scalars(select(Event).where(
            Event.attempt_id == attempt_id, Event.kind == "note"))]
        scores = [(s.kind.value, s.raw) for s in session.scalars(
            select(ScoreEvent).where(ScoreEvent.attempt_id == attempt_id).order_by(ScoreEvent.id))]
    assert (attempt.status, attempt.submitted, attempt.final_raw) == (AttemptStatus.DONE, True, 7.0)
    assert attempt.final_normalized == pytest.approx(0.6)
    assert scores == [("baseline", 1.0), ("intermediate", 7.0)]
    assert [p[0] for p in pauses] == ["setup", "waiting", "break"]
    assert all(end is not None and end >= start for _, start, end in pauses)
    waiting, brk = pauses[1], pauses[2]
    assert waiting[2] - waiting[1] >= 0.6 - 0.05  # everything before `task start` is not working time
    assert brk[2] - brk[1] >= 1.5
    # working time: from `task start` to the end, less the break (0.2 + 0.3 + 0.3 s, a score and the 0.5 s
    # between `task submit` and the end)
    assert 1.3 < attempt.working_s < 2.5 and attempt.wall_s > attempt.working_s + 2.0
    assert len(tasks) == len(driver.replies) and tasks[0]["command"] == "score" and tasks[0]["exit_code"] == 1
    assert notes[0] == "reading the task"


_WRITER = """
import sys, time
from rebench.context import AttemptRecorder
from rebench.human.clock import wall_clock
from rebench.store.db import Store
store, attempt_id = Store(sys.argv[1]), int(sys.argv[2])
clock = wall_clock(); clock.start()
recorder = AttemptRecorder(store, attempt_id, clock)
waiting = clock.pause("waiting"); row = recorder.pause_started(waiting)
time.sleep(0.5); clock.resume(waiting); recorder.pause_ended(row, waiting)
time.sleep(0.5)
brk = clock.pause("break"); recorder.pause_started(brk)
recorder.event("note", message="about to die"); recorder.flush()
print(clock.started_at, flush=True)
time.sleep(0.3)
print(clock.working_seconds(), flush=True)
import os; os.kill(os.getpid(), 9)
"""


def test_clock_survives_the_process(tmp_path: Path) -> None:
    """A supervisor killed on a break: the next process rebuilds the clock from the database (the
    break still open, harness work closed), adds the harness-down pause, and numbers events on."""
    store = Store(tmp_path / "clock.db")
    attempt_id = _plan(store)
    result = subprocess.run([sys.executable, "-c", _WRITER, str(store.path), str(attempt_id)],
                            capture_output=True, text=True, timeout=60, env=os.environ)
    assert result.returncode == -9, result.stderr
    origin, working_then = (float(x) for x in result.stdout.split())
    time.sleep(0.5)
    down_since = time.time() - 0.4
    restored = restore_clock(store, attempt_id, origin, down_since=down_since)
    clock = restored.clock
    assert set(restored.open_pauses) == {"break"}
    assert clock.working_seconds() == pytest.approx(working_then, abs=0.1)  # on a break: nothing counts
    interval, _row = restored.open_pauses["break"]
    clock.resume(interval)
    time.sleep(0.3)
    assert clock.working_seconds() == pytest.approx(working_then + 0.3, abs=0.1)
    with store.session() as session:
        down = session.scalars(select(Pause).where(Pause.reason == HARNESS_DOWN)).one()
        assert down.end_s - down.start_s == pytest.approx(0.4, abs=0.1)
    from rebench.context import AttemptRecorder

    recorder = AttemptRecorder(store, attempt_id, clock)
    recorder.event("note", message="resumed")
    recorder.close()
    with store.session() as session:
        seqs = [e.seq for e in session.scalars(select(Event).where(Event.attempt_id == attempt_id).order_by(Event.id))]
    assert seqs == [1, 2]
    # reading it again for `rebench human status` writes nothing
    before = _pause_rows(store)
    restore_clock(store, attempt_id, origin, down_since=time.time() - 5, persist=False)
    assert _pause_rows(store) == before


def _pause_rows(store: Store) -> list[tuple[str, float, float | None]]:
    with store.session() as session:
        return [(p.reason, p.start_s, p.end_s) for p in session.scalars(select(Pause).order_by(Pause.id))]


def test_a_resumed_attempt_keeps_its_score_snapshots_for_rescoring(fixture_envs: Path, tmp_path: Path) -> None:
    """A supervisor that reattaches (rebench human attach) carries on from the snapshots the dead one
    took at score calls: same folder, numbering and dedupe go on, and they stay candidates for
    re-scoring, instead of a fresh `attempt-N.2` folder that forgets them."""
    from rebench.clock import AttemptClock
    from rebench.context import AttemptRecorder
    from rebench.sandbox.snapshot import SnapshotBudget
    from rebench.scoring.rescore import ScoreSnapshots
    from rebench.scoring.result import ScoreResult
    from rebench.store.models import ScoreKind

    store = Store(tmp_path / "human.db")
    attempt_id = _plan(store)
    snapshots = tmp_path / "snapshots"
    base = snapshots / f"attempt-{attempt_id}"
    recorder = AttemptRecorder(store, attempt_id, AttemptClock())
    for number, (raw, digest) in enumerate([(3.0, "aa"), (8.0, "bb"), (8.0, "bb")], start=1):
        score_id = recorder.score(ScoreResult(raw=raw, message={"score": raw}), ScoreKind.INTERMEDIATE)
        path = base / f"score-{number:03d}"
        if number < 3:
            path.mkdir(parents=True)
            recorder.event("snapshot", path=str(path), note="kept", score_id=score_id, sha256=digest,
                           files=1, bytes=10)
        else:
            recorder.event("snapshot", path=str(base / "score-002"), note="same content, kept once",
                           score_id=score_id, sha256=digest)
    recorder.close()

    env = EnvironmentRegistry(fixture_envs).get("counter")
    runner = AttemptRunner(store, env, backend="local", snapshots_dir=snapshots)
    fresh = runner._snapshot_base(attempt_id)
    assert fresh.name == f"attempt-{attempt_id}.2"  # what a resumed run used to get
    restored = ScoreSnapshots(fresh, SnapshotBudget(1000, 100))
    assert runner._restore_snapshots(attempt_id, fresh, restored) == base
    assert restored.root == base
    assert [(s.path, s.raw, s.duplicate_of) for s in restored.taken] == [
        (str(base / "score-001"), 3.0, None), (str(base / "score-002"), 8.0, None),
        (str(base / "score-002"), 8.0, str(base / "score-002"))]
    assert (restored.budget.used_bytes, restored.budget.used_files) == (20, 2)
    nothing = ScoreSnapshots(fresh, SnapshotBudget(1000, 100))
    assert runner._restore_snapshots(_plan(store), fresh, nothing) == fresh and nothing.taken == []
    store.close()
