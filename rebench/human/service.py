"""What `rebench human start|list|status|stop|attach` do (rebench.api re-exports them).

Every check on the operator's input runs before any row is written; the attempt itself runs
in a supervisor process (rebench.human.supervisor), detached from the operator's terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy import select

from rebench.errors import RebenchError
from rebench.human.clock import restore_clock
from rebench.human.planning import LOOPBACK, plan_human
from rebench.human.supervisor import log_path, supervise
from rebench.processes import pid_alive
from rebench.store.db import Store
from rebench.store.models import FINISHED_STATUSES, Attempt, AttemptStatus, HumanSession, HumanState, ScoreEvent

READY_TIMEOUT_S = 900.0
ALIVE_HEARTBEAT_S = 15.0
"""A supervisor whose heartbeat is older than this is taken for dead (its pid may be reused)."""


class HumanStart(BaseModel):
    """A human attempt ready for its expert: how to connect."""

    attempt_id: int
    host: str
    port: int
    key: str = "PRIVATE_KEY"
    """The expert's private key file (the public one given to `start`, without `.pub`)."""
    log: str

    @property
    def ssh_command(self) -> str:
        return f"ssh -i {self.key} -p {self.port} agent@{self.host}"

    def instructions(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return "\n".join([
            f"human attempt {self.attempt_id} is ready; the expert connects with:",
            f"  {self.ssh_command}",
            f"copy files with `scp -i {self.key} -P {self.port} FILE agent@{host}:solution/`; VS Code "
            f"Remote-SSH works with a host entry (HostName {self.host}, Port {self.port}, User agent, "
            f"IdentityFile {self.key}).",
            "inside, the task is in ~/instructions.md and the solution in ~/solution; `task start` starts the "
            "clock; then task pause REASON | resume | status | score | score-log | note TEXT | submit",
            f"supervisor log: {self.log}",
        ])


class HumanAttemptInfo(BaseModel):
    attempt_id: int
    environment: str
    profile: str
    expert: str
    status: str
    state: str
    budget_s: float
    working_s: float
    left_s: float
    bind: str
    port: int | None
    supervisor_alive: bool
    stop_requested: str | None = None
    final_normalized: float | None = None
    scores: list[dict[str, object]] = []
    pauses: list[dict[str, object]] = []


def spawn_supervisor(store: Store, attempt_id: int, *, resume: bool = False) -> int:
    """Start the attempt's supervisor in a session of its own (the operator's terminal may close)."""
    log = log_path(store, attempt_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "rebench.human.supervisor", "--db", str(store.path.resolve()),
               "--attempt", str(attempt_id)] + (["--resume"] if resume else [])
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    with store.session() as session:
        session.get_one(HumanSession, attempt_id).supervisor_pid = proc.pid
    return proc.pid


def supervisor_alive(human: HumanSession) -> bool:
    """Its process runs here and its heartbeat is fresh (a reused pid has no heartbeat)."""
    if human.supervisor_host not in (None, socket.gethostname()) or not pid_alive(human.supervisor_pid):
        return False
    beat = human.heartbeat_at
    if beat is None:
        return True  # just spawned: not beating yet
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=UTC)
    return (datetime.now(UTC) - beat).total_seconds() < ALIVE_HEARTBEAT_S


def _private(key: Path | None) -> str:
    if key is None:
        return "PRIVATE_KEY"
    return str(key)[:-4] if key.name.endswith(".pub") else str(key)


def wait_ready(store: Store, attempt_id: int, key: Path | None, *, timeout_s: float = READY_TIMEOUT_S,
               abandon: bool = False, action: str = "start") -> HumanStart:
    """Until the attempt waits for its expert; a failed supervisor's reason as a RebenchError.
    `abandon` (a fresh start, where no expert's work is at stake yet): then clean up after it."""
    deadline = time.monotonic() + timeout_s
    while True:
        with store.session() as session:
            attempt = session.get_one(Attempt, attempt_id)
            human = session.get_one(HumanSession, attempt_id)
            if human.state in (HumanState.WAITING, HumanState.WORKING, HumanState.ON_BREAK) and human.port:
                host = human.bind if human.bind not in ("0.0.0.0", "::") else socket.gethostname()
                return HumanStart(attempt_id=attempt_id, host=host, port=human.port, key=_private(key),
                                  log=str(log_path(store, attempt_id)))
            failed = attempt.status in FINISHED_STATUSES or human.state == HumanState.ENDED
            dead = not pid_alive(human.supervisor_pid)
        if failed or dead or time.monotonic() > deadline:
            reason = attempt.error_message or (f"did not become ready within {timeout_s:.0f} s" if not dead
                                               else "its supervisor exited")
            if abandon and not failed:
                _abandon(store, attempt_id, reason)
            raise RebenchError(f"human attempt {attempt_id} failed to {action}: {_one_line(reason)} "
                               f"(log: {log_path(store, attempt_id)})")
        time.sleep(0.2)


def _abandon(store: Store, attempt_id: int, reason: str) -> None:
    """A start that failed leaves nothing running: no supervisor, no container, no gate folder; the
    attempt row says why (status error)."""
    import shutil
    import signal

    from rebench.store.models import ErrorSource

    _, human = _human(store, attempt_id)
    if human.supervisor_pid and pid_alive(human.supervisor_pid):
        with contextlib.suppress(OSError):
            os.kill(human.supervisor_pid, signal.SIGKILL)
    if human.container_id:
        from rebench.sandbox.docker.engine import DockerEngine

        with contextlib.suppress(Exception):
            DockerEngine.connect().remove_container(human.container_id)
    if human.gate_dir:
        shutil.rmtree(human.gate_dir, ignore_errors=True)
    with store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        if attempt.status not in FINISHED_STATUSES:
            attempt.status, attempt.error_source = AttemptStatus.ERROR, ErrorSource.INFRASTRUCTURE
            attempt.error_message = f"failed to start: {reason}"
        session.get_one(HumanSession, attempt_id).state = HumanState.ENDED


def _one_line(text: str) -> str:
    return " ".join(text.split())


def start_human(store: Store, *, environment: str, profile: str, budget: str, name: str, key: Path,
                bind: str = LOOPBACK, port: int = 0, backend: str = "docker", gpus: list[int] | None = None,
                foreground: bool = False, on_ready: Callable[[HumanStart], None] | None = None) -> HumanStart:
    """Plan a human attempt and start its supervisor; returns once the expert can connect
    (detached), or once the attempt ended (`foreground`, after `on_ready` was called)."""
    attempt_id = plan_human(store, environment=environment, profile=profile, budget=budget, name=name, key=key,
                            bind=bind, port=port, backend=backend, gpus=gpus)
    if not foreground:
        spawn_supervisor(store, attempt_id)
        return wait_ready(store, attempt_id, key, abandon=True)
    ready: list[HumanStart] = []

    def announce(bound: int) -> None:
        with store.session() as session:
            address = session.get_one(HumanSession, attempt_id).bind
        ready.append(HumanStart(attempt_id=attempt_id, host=address, port=bound, key=_private(key),
                                log="(this terminal)"))
        _detach_on_signals(attempt_id)
        if on_ready is not None:
            on_ready(ready[-1])

    outcome = asyncio.run(supervise(store, attempt_id, on_ready=announce))
    if not ready:
        raise RebenchError(f"human attempt {attempt_id} failed to start: {_one_line(outcome.error_message or '')}")
    return ready[-1]


def _detach_on_signals(attempt_id: int) -> None:
    """Once the expert can connect, Ctrl-C, a closed terminal or SIGTERM leave a foreground
    supervisor without ending the attempt: the container keeps the expert's sessions and work,
    and `attach` or `stop` takes over (the time without a supervisor does not count). Only
    `rebench human stop` ends a human attempt."""

    def detach(signum: int, _frame: object) -> None:
        with contextlib.suppress(Exception):
            print(f"detached from human attempt {attempt_id} ({signal.Signals(signum).name}); it keeps running: "
                  f"`rebench human attach {attempt_id}` supervises it again, `rebench human stop {attempt_id}` "
                  "ends it", file=sys.stderr, flush=True)
        os._exit(0)  # as if this process had died: no runner clean-up may remove the container

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, detach)


def _human(store: Store, attempt_id: int) -> tuple[Attempt, HumanSession]:
    with store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        human = session.get(HumanSession, attempt_id)
    if attempt is None or human is None:
        raise RebenchError(f"no human attempt {attempt_id} in {store.path}; `rebench human list` shows them")
    return attempt, human


def human_info(store: Store, attempt_id: int, *, details: bool = False) -> HumanAttemptInfo:
    attempt, human = _human(store, attempt_id)
    running = attempt.status not in FINISHED_STATUSES
    working = attempt.working_s
    if running and human.clock_origin is not None:
        working = restore_clock(store, attempt_id, human.clock_origin, persist=False).clock.working_seconds()
    info = HumanAttemptInfo(
        attempt_id=attempt.id, environment=attempt.environment, profile=attempt.profile, expert=human.expert,
        status=attempt.status.value, state=human.state.value, budget_s=attempt.budget_s, working_s=working,
        left_s=max(0.0, attempt.budget_s - working), bind=human.bind, port=human.port,
        supervisor_alive=running and supervisor_alive(human), stop_requested=human.stop_requested,
        final_normalized=attempt.final_normalized)
    if details:
        with store.session() as session:
            full = session.get_one(Attempt, attempt_id)
            info.scores = [{"kind": s.kind.value, "working_s": s.working_s, "raw": s.raw, "valid": s.valid}
                           for s in session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt_id)
                                                    .order_by(ScoreEvent.id))]
            info.pauses = [{"reason": p.reason, "start_s": p.start_s, "end_s": p.end_s} for p in full.pauses]
    return info


def list_humans(store: Store) -> list[HumanAttemptInfo]:
    with store.session() as session:
        ids = list(session.scalars(select(HumanSession.attempt_id).order_by(HumanSession.attempt_id)))
    return [human_info(store, attempt_id) for attempt_id in ids]


def _check_resumable(store: Store, attempt_id: int, action: str) -> tuple[Attempt, HumanSession]:
    attempt, human = _human(store, attempt_id)
    if attempt.status in FINISHED_STATUSES:
        raise RebenchError(f"human attempt {attempt_id} already ended ({attempt.status.value}); nothing to {action}")
    return attempt, human


def attach_human(store: Store, attempt_id: int) -> HumanStart:
    """A new supervisor for a running attempt whose supervisor died; returns once it serves again."""
    _, human = _check_resumable(store, attempt_id, "attach to")
    if supervisor_alive(human):
        raise RebenchError(f"human attempt {attempt_id} still has a live supervisor (pid {human.supervisor_pid}); "
                           "`rebench human status` shows it")
    if human.container_id is None:
        raise RebenchError(f"human attempt {attempt_id} never got its container running; "
                           f"`rebench human stop {attempt_id}` ends it")
    with store.session() as session:
        session.get_one(HumanSession, attempt_id).state = HumanState.STARTING
    spawn_supervisor(store, attempt_id, resume=True)
    return wait_ready(store, attempt_id, None, action="resume")


def stop_human(store: Store, attempt_id: int, reason: str | None = None,
               log: Callable[[str], None] = lambda _m: None) -> HumanAttemptInfo:
    """Ask the supervisor to end the attempt (`done`, its work scored and snapshotted) and wait for it;
    with no live supervisor, reattach here and end it."""
    _, human = _check_resumable(store, attempt_id, "stop")
    with store.session() as session:
        session.get_one(HumanSession, attempt_id).stop_requested = reason or "no reason given"
    if supervisor_alive(human):
        while True:
            with store.session() as session:
                if session.get_one(Attempt, attempt_id).status in FINISHED_STATUSES:
                    break
                alive = supervisor_alive(session.get_one(HumanSession, attempt_id))
            if not alive:
                break
            time.sleep(0.2)
    _, human = _human(store, attempt_id)
    attempt, _ = _human(store, attempt_id)
    if attempt.status not in FINISHED_STATUSES:
        if human.container_id is None:
            with store.session() as session:
                row = session.get_one(Attempt, attempt_id)
                row.status, row.error_message = AttemptStatus.INTERRUPTED, "stopped before its container ran"
                session.get_one(HumanSession, attempt_id).state = HumanState.ENDED
        else:
            asyncio.run(supervise(store, attempt_id, resume=True, log=log))
    return human_info(store, attempt_id, details=True)
