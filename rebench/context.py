"""AttemptContext: the runner's implementation of the agent's door to the world.

Every method records an event row, so an attempt can be replayed from the
database, and every method goes through the sandbox, so the hard timer can
cancel it and kill what it started.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import json
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rebench.agents.base import AgentConfig, EnvironmentInfo, LimitExceeded, ModelUsage
from rebench.clock import AttemptClock, PauseInterval
from rebench.errors import SandboxError
from rebench.sandbox.base import ExecResult, Sandbox, SandboxPaths
from rebench.sandbox.output import head_and_tail
from rebench.sandbox.snapshot import SnapshotReport
from rebench.scoring.rescore import ScoreSnapshot, ScoreSnapshots
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import CallTokens, run_scoring
from rebench.store.batching import writer_for
from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.models import Attempt, Event, Pause, ScoreEvent, ScoreKind, utcnow

EVENT_OUTPUT_LIMIT = 20_000


def _short(text: str, limit: int = EVENT_OUTPUT_LIMIT) -> str:
    """Output as kept in the event log: the shared head-and-tail cut (rebench.sandbox.output)."""
    head, tail, dropped = head_and_tail(text, limit)
    return f"{head}\n[... {dropped} characters cut ...]\n{tail}" if dropped else head


T = TypeVar("T")


class UsageTotals(NamedTuple):
    """An attempt's model usage so far, as its limits read it."""

    input_tokens: int
    output_tokens: int
    cost_usd: float


FLUSH_INTERVAL_S = 0.05
"""How often buffered events are committed: a SIGKILL of the harness loses at most the
events of the last interval plus one commit (well under 100 ms)."""

_OPEN_RECORDERS: weakref.WeakSet[AttemptRecorder] = weakref.WeakSet()


@atexit.register
def _flush_open_recorders() -> None:
    """A normal interpreter exit (an uncaught error, sys.exit) still commits buffered events."""
    for recorder in list(_OPEN_RECORDERS):
        with contextlib.suppress(Exception):
            recorder.close()


class AttemptRecorder:
    """Writes an attempt's events, scores and pauses as they happen.

    Events are checked against their schema (rebench.store.events) when recorded, then
    buffered and committed by the store's one writer thread (rebench.store.batching), with
    every other attempt's, every FLUSH_INTERVAL_S in one transaction: a tool call no longer
    waits for a synchronous SQLite commit. Scores, pauses and usage totals are committed
    before their call returns, together with every event recorded before them, so the log
    stays in order. `close()` commits the rest.
    """

    def __init__(self, store: Store, attempt_id: int, clock: AttemptClock,
                 *, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.clock = clock
        self.flush_interval_s = flush_interval_s
        self._seq = self._last_seq()
        """Continues the attempt's numbering: a resumed attempt (a human attempt picked up again by
        `rebench human attach`) appends to its log instead of repeating sequence numbers."""
        self._writer = writer_for(store, flush_interval_s)
        self._closed = False
        self._totals: UsageTotals | None = None
        self._writer.open()
        _OPEN_RECORDERS.add(self)

    def _last_seq(self) -> int:
        with self.store.session() as session:
            last = session.scalar(select(func.max(Event.seq)).where(Event.attempt_id == self.attempt_id))
        return int(last or 0)

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def event(self, kind: str, duration_s: float = 0.0, *, _with: Callable[[Session], object] | None = None,
              **data: Any) -> None:
        """Record one event; raises EventSchemaError (nothing recorded) when the payload does not fit its kind.
        `_with`: a write committed in the same transaction as the event."""
        row = {"attempt_id": self.attempt_id, "kind": kind, "working_s": self.clock.working_seconds(),
               "duration_s": duration_s, "created_at": utcnow(), "data": validate_event(kind, data)}
        self._writer.add(row, self._next, _with)
        if self._closed:  # closed: what comes after is written at once
            self._commit()

    def _commit(self, then: Callable[[Session], T] | None = None) -> T | None:
        """Commit the buffered events (every attempt's), and `then`'s writes, in one transaction."""
        return self._writer.commit(then)

    def _add(self, row: ScoreEvent | Pause) -> int:
        """Commit one row (with the buffered events before it) and return its id."""

        def add(session: Session) -> int:
            session.add(row)
            session.flush()
            return row.id

        row_id = self._commit(add)
        assert row_id is not None
        return row_id

    def flush(self) -> None:
        """Commit every event recorded so far (and any a failed background commit kept)."""
        self._commit()

    def close(self) -> None:
        """Leave the store's writer and commit what is left (idempotent)."""
        if not self._closed:
            self._closed = True
            self._writer.close()
        _OPEN_RECORDERS.discard(self)
        self._commit()

    def score(self, result: ScoreResult, kind: ScoreKind, extra: dict[str, Any] | None = None) -> int:
        """Committed before returning: a score is never only in the buffer. `extra` goes into the
        details (what a re-score re-measured). Returns the score event's id."""
        details = {**result.details, **extra} if extra else result.details
        row = ScoreEvent(attempt_id=self.attempt_id, kind=kind, working_s=self.clock.working_seconds(),
                         raw=result.raw if result.valid else None, valid=result.valid,
                         message=result.message, details=details, duration_s=result.duration_s)
        return self._add(row)

    def pause_started(self, interval: PauseInterval) -> int:
        row = Pause(attempt_id=self.attempt_id, reason=interval.reason,
                    start_s=self.clock.offset(interval.start), end_s=None)
        return self._add(row)

    def pause_ended(self, row_id: int, interval: PauseInterval) -> None:
        def end(session: Session) -> None:
            row = session.get(Pause, row_id)
            if row is not None and interval.end is not None:
                row.end_s = self.clock.offset(interval.end)

        self._commit(end)

    def model_call(self, usage: ModelUsage, **event: Any) -> UsageTotals:
        """Record a model call's event and add its usage to the attempt's totals, both written with the
        next batch in one transaction (so the two agree whatever ends the harness); the totals it
        returns, for the limits, are kept here, where nothing waits on a commit for them."""

        def add(session: Session) -> None:
            attempt = session.get_one(Attempt, self.attempt_id)
            attempt.input_tokens += usage.input_tokens
            attempt.output_tokens += usage.output_tokens
            attempt.cached_tokens += usage.cached_tokens
            attempt.cost_usd += usage.cost_usd
            attempt.model_wait_s += usage.wait_s

        if self._totals is None:
            with self.store.session() as session:
                attempt = session.get_one(Attempt, self.attempt_id)
                self._totals = UsageTotals(attempt.input_tokens, attempt.output_tokens, attempt.cost_usd)
        self.event("model_call", usage.wait_s, _with=add, **usage.model_dump(), **event)
        self._totals = UsageTotals(self._totals.input_tokens + usage.input_tokens,
                                   self._totals.output_tokens + usage.output_tokens,
                                   self._totals.cost_usd + usage.cost_usd)
        return self._totals


class AttemptContext:
    """Implements rebench.agents.AgentContext for one attempt."""

    def __init__(
        self,
        *,
        sandbox: Sandbox,
        recorder: AttemptRecorder,
        clock: AttemptClock,
        instructions: str,
        environment: EnvironmentInfo,
        config: AgentConfig,
        budget_s: float,
        seed: int,
        score_timeout_s: float,
        reference_dir: Path | None,
        max_command_timeout_s: float | None = None,
        score_snapshots: ScoreSnapshots | None = None,
        score_tokens: CallTokens | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.recorder = recorder
        self.clock = clock
        self.instructions = instructions
        self.environment = environment
        self.config = config
        self.budget_s = budget_s
        self.seed = seed
        self.reference_dir = reference_dir
        self.score_timeout_s = score_timeout_s
        self.max_command_timeout_s = max_command_timeout_s
        self.score_snapshots = score_snapshots
        self.score_tokens = score_tokens
        """The model gateway, which mints each score call's own token for the code the scorer runs."""
        """Where the solution is snapshotted at each score call (rescore_best, or best with a held-out split:
        rebench.scoring.heldout.snapshots_at_calls); None: not."""
        self.submitted = asyncio.Event()
        self.answer: str | None = None
        self.limit_reason: str | None = None
        self._scores: list[ScoreResult] = []
        self.agent_ended = False
        self._on_agent_end: list[Callable[[], None]] = []

    @property
    def paths(self) -> SandboxPaths:
        return self.sandbox.paths

    def elapsed_s(self) -> float:
        return self.clock.working_seconds()

    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self.clock.working_seconds())

    def _timeout(self, requested: float | None) -> float:
        """No command may outlive the budget, whatever timeout the agent asks for."""
        allowed = self.remaining_s() + 1.0
        if self.max_command_timeout_s is not None:
            allowed = min(allowed, self.max_command_timeout_s)
        return min(requested, allowed) if requested is not None else allowed

    async def _exec(self, kind: str, command: str, shown: dict[str, Any], timeout: float | None,
                    stdin: bytes | None = None) -> ExecResult:
        started = time.monotonic()
        try:
            result = await self.sandbox.exec(command, user="agent", timeout=self._timeout(timeout), stdin=stdin)
        except asyncio.CancelledError:
            self.recorder.event(kind, time.monotonic() - started, **shown, cancelled=True)
            raise
        self.recorder.event(kind, result.duration_s, **shown, exit_code=result.exit_code,
                            timed_out=result.timed_out, stdout=_short(result.stdout), stderr=_short(result.stderr))
        return result

    async def bash(self, command: str, *, timeout: float | None = None) -> ExecResult:
        return await self._exec("bash", command, {"command": command, "timeout": timeout}, timeout)

    async def python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        return await self._exec("python", "python -", {"code": code, "timeout": timeout}, timeout,
                                stdin=code.encode())

    async def read_file(self, path: str) -> str:
        data = await self.sandbox.agent_read_file(self._agent_path(path))
        self.recorder.event("read_file", path=path, bytes=len(data))
        return data.decode("utf-8", errors="replace")

    async def write_file(self, path: str, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else content
        await self.sandbox.agent_write_file(self._agent_path(path), data)
        self.recorder.event("write_file", path=path, bytes=len(data),
                            content=_short(data.decode("utf-8", errors="replace"), 4000))

    async def upload_dir(self, source: Path, dest: str) -> None:
        await self.sandbox.agent_copy_in(str(source), self._agent_path(dest))
        self.recorder.event("upload_dir", source=str(source), dest=dest)

    def _agent_path(self, path: str) -> str:
        """Relative paths are under the solution folder. The check here is only a friendlier message
        for the plain case: the defence is that the sandbox does every agent file operation with the
        agent's own rights (Sandbox.agent_read_file and the rest), so the kernel decides."""
        if path.startswith("/"):
            if path == self.paths.protected or path.startswith(self.paths.protected + "/"):
                raise PermissionError(errno.EACCES, "the agent cannot reach the protected folder", path)
            return path
        return f"{self.paths.solution}/{path}"

    async def score(self) -> dict[str, Any]:
        started = time.monotonic()
        taken = await self._snapshot_for_score()
        result = await run_scoring(self.sandbox, self.score_timeout_s, self.score_tokens)
        self._scores.append(result)
        score_id = self.recorder.score(result, ScoreKind.INTERMEDIATE)
        if taken is not None:
            snapshot, report = taken
            snapshot.score_id, snapshot.raw = score_id, (result.raw if result.valid else None)
            note = (f"same content as {snapshot.duplicate_of}, kept once" if snapshot.duplicate_of
                    else report.note())
            fields = {} if snapshot.duplicate_of else report.model_dump()
            self.recorder.event("snapshot", path=snapshot.path, note=note, score_id=score_id,
                                sha256=snapshot.sha256, **fields)
        feedback = result.feedback(self.environment.score_visible)
        self.recorder.event("score", time.monotonic() - started, feedback=feedback)
        return feedback

    async def _snapshot_for_score(self) -> tuple[ScoreSnapshot, SnapshotReport] | None:
        """The solution as this score call is about to score it, copied out with the clock paused
        (harness work, not the agent's); None when not asked for or when the copy failed."""
        if self.score_snapshots is None:
            return None
        with self.pause("snapshot"):
            try:
                return await self.score_snapshots.take(self.sandbox)
            except (OSError, SandboxError) as exc:
                self.recorder.event("snapshot", note=f"score snapshot failed: {type(exc).__name__}: {exc}")
                return None

    def score_feedback(self) -> list[dict[str, Any]]:
        """The score log as the agent sees it, without recording that it was asked for (`score_log`
        does): the human task commands show it in their status lines."""
        return [r.feedback(self.environment.score_visible) for r in self._scores]

    def restore_scores(self, earlier: Sequence[ScoreResult]) -> None:
        """Put a resumed attempt's earlier intermediate scores ahead of this run's in the score log."""
        self._scores[:0] = list(earlier)

    async def score_log(self) -> list[dict[str, Any]]:
        log = self.score_feedback()
        self.recorder.event("score_log", entries=len(log))
        return log

    async def submit(self, answer: str | None = None) -> None:
        self.answer = answer
        self.recorder.event("submit", answer=answer)
        self.submitted.set()

    def on_agent_end(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the agent's time is over (at once if it is): what the agent can reach
        from outside the harness's process (the `task` door) closes then."""
        if self.agent_ended:
            callback()
        else:
            self._on_agent_end.append(callback)

    def end_agent(self) -> None:
        """The agent's time is over (its run ended, its budget ran out, it submitted): the watchdog says
        so before it cancels the agent, so nothing the agent left running scores after its end."""
        if self.agent_ended:
            return
        self.agent_ended = True
        callbacks, self._on_agent_end = self._on_agent_end, []
        for callback in callbacks:
            callback()

    async def sleep(self, seconds: float) -> None:
        started = time.monotonic()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.recorder.event("sleep", time.monotonic() - started, seconds=seconds)

    def record_model_call(self, usage: ModelUsage, **event: Any) -> None:
        self.clock.model_wait_s += usage.wait_s
        attempt = self.recorder.model_call(usage, **event)
        tokens = attempt.input_tokens + attempt.output_tokens
        if self.config.token_limit is not None and tokens >= self.config.token_limit:
            self._limit("tokens", f"{tokens} tokens used, limit {self.config.token_limit}")
        if self.config.cost_limit_usd is not None and attempt.cost_usd >= self.config.cost_limit_usd:
            self._limit("cost", f"${attempt.cost_usd:.4f} spent, limit ${self.config.cost_limit_usd:.4f}")

    def _limit(self, which: str, detail: str) -> None:
        self.limit_reason = which
        self.recorder.event("limit", which=which, detail=detail)
        raise LimitExceeded(which, detail)

    def log_event(self, kind: str, **data: Any) -> None:
        """An agent's own event: `kind` must be one of rebench.store.events.EventKind (`note` for
        anything else) and `data` must fit its model, or EventSchemaError is raised."""
        self.recorder.event(kind, **json.loads(json.dumps(data, default=str)))

    @contextmanager
    def pause(self, reason: str) -> Iterator[PauseInterval]:
        interval = self.clock.pause(reason)
        row = self.recorder.pause_started(interval)
        try:
            yield interval
        finally:
            self.clock.resume(interval)
            self.recorder.pause_ended(row, interval)
