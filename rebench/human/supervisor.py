"""The supervisor of one human attempt: a process of its own (`python -m rebench.human.supervisor`).

It runs the attempt through the AttemptRunner with the `HumanAgent` below as its agent: the
runner starts the keep-alive sandbox, installs the environment, takes the baseline score and
enforces the working-time budget with its watchdog, then snapshots, scores and removes the
container as for any agent. The HumanAgent opens the SSH gate, relays connections to it,
answers `task` commands, writes a heartbeat and the SSH sessions' events, and ends the attempt
on `rebench human stop`. With `--resume` it reattaches to the running container instead
(`rebench human attach`, or `stop` of an attempt whose supervisor died).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import socket
import stat
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from rebench.agents.base import AgentConfig, AgentContext
from rebench.attempt_outcome import AttemptOutcome
from rebench.context import AttemptContext
from rebench.human.clock import RestoredClock, restore_clock, wall_clock
from rebench.human.gpus import leased
from rebench.human.tasks import TaskCommands
from rebench.runner import AttemptRunner, RunHooks
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.scoring.result import ScoreResult
from rebench.store.db import Store
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Event,
    EventKind,
    HumanSession,
    HumanState,
    ScoreEvent,
    ScoreKind,
)

INSTRUCTIONS_FILE = "instructions.md"
"""In the expert's home: the environment's task text, as agents get it."""
HEARTBEAT_S = 2.0
TICK_S = 0.25
BACKEND = "docker"


KEPT_NAME = re.compile(r"casts/session-[0-9]+\.cast|sessions\.jsonl")
"""What the gate writes and the supervisor keeps (rebench.sandbox.human.gate names them so)."""


def human_dir(store: Store, attempt_id: int) -> Path:
    """Where a human attempt's log and recordings are kept, next to the database."""
    return store.path.resolve().parent / "human" / f"attempt-{attempt_id}"


def log_path(store: Store, attempt_id: int) -> Path:
    return store.path.parent / "human" / f"attempt-{attempt_id}.log"


def update_session(store: Store, attempt_id: int, **fields: Any) -> None:
    with store.session() as session:
        row = session.get_one(HumanSession, attempt_id)
        for key, value in fields.items():
            setattr(row, key, value)


class SessionLog:
    """Turns the gate's sessions.jsonl lines into `ssh_session` events (one per open and per close
    line) and keeps each recording with the attempt once its session closed."""

    def __init__(self, store: Store, attempt_id: int, gate_dir: Path) -> None:
        self.gate_dir = gate_dir
        self.kept = human_dir(store, attempt_id)
        with store.session() as session:
            self.seen = int(session.scalar(select(func.count(Event.id)).where(
                Event.attempt_id == attempt_id, Event.kind == EventKind.SSH_SESSION)) or 0)

    def keep(self, recording: str | None) -> str | None:
        """Copy one recording next to the database; its kept path (None: nothing to keep).

        The gate folder is writable from the container: a name the gate did not make
        (`KEPT_NAME`) is ignored, and no symlink there is followed, so nothing of the host
        outside the gate folder is ever copied."""
        if not recording or not KEPT_NAME.fullmatch(recording):
            return None
        target = self.kept / recording
        with contextlib.suppress(OSError):
            if (self.gate_dir / "casts").is_symlink():
                return str(target)
            fd = os.open(self.gate_dir / recording, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as source:
                if stat.S_ISREG(os.fstat(source.fileno()).st_mode):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with target.open("wb") as kept:
                        shutil.copyfileobj(source, kept)
        return str(target)

    def poll(self, ctx: AttemptContext) -> None:
        from rebench.sandbox.docker.ssh import read_sessions

        try:
            lines = read_sessions(self.gate_dir)
        except OSError:
            return
        for line in lines[self.seen:]:
            ended = line.get("event") == "close"
            recording = line.get("recording")
            kept = self.keep(recording) if ended else (str(self.kept / recording) if recording else None)
            ctx.recorder.event("ssh_session", session=int(line.get("session") or 0), mode=str(line.get("mode")),
                               command=line.get("command"), recording=kept, ended=ended,
                               bytes_in=line.get("bytes_in"), bytes_out=line.get("bytes_out"))
            self.seen += 1

    def keep_all(self) -> None:
        """Every recording and the gate's session log, kept beside the database."""
        with contextlib.suppress(OSError):
            for path in sorted((self.gate_dir / "casts").glob("*.cast")):
                self.keep(str(path.relative_to(self.gate_dir)))
            self.keep("sessions.jsonl")


class HumanAgent:
    """The agent of a human attempt: the expert works over SSH; this serves them until the end."""

    uses_reference = False

    def __init__(self, store: Store, attempt_id: int, *, restored: RestoredClock | None = None,
                 on_ready: Callable[[int], None] | None = None, log: Callable[[str], None] = print) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.restored = restored
        self.on_ready = on_ready
        self.log = log
        with store.session() as session:
            row = session.get_one(HumanSession, attempt_id)
            self.public_key, self.bind, self.port = row.public_key, row.bind, row.port or 0
            self.gate_dir = Path(row.gate_dir or "")

    def on_started(self, sandbox: Sandbox, clock: Any) -> None:
        """Remember the container at once: whatever happens next, `attach` or `stop` can find it."""
        update_session(self.store, self.attempt_id, container_id=getattr(sandbox, "container_id", None),
                       clock_origin=clock.started_at)

    def _stop_requested(self) -> str | None:
        with self.store.session() as session:
            return session.get_one(HumanSession, self.attempt_id).stop_requested

    async def run(self, ctx: AgentContext) -> None:
        from rebench.sandbox.docker.ssh import SshRelay, open_ssh

        assert isinstance(ctx, AttemptContext)  # the runner's context: the recorder and the sandbox

        self._load_scores(ctx)
        commands = TaskCommands(ctx, set_state=lambda state: update_session(self.store, self.attempt_id, state=state),
                                open_pauses=self.restored.open_pauses if self.restored else None)
        sessions = SessionLog(self.store, self.attempt_id, self.gate_dir)
        relay: SshRelay | None = None
        try:
            reason = self._stop_requested()
            if reason is None:
                if self.restored is None:  # what an agent gets in its prompt, the expert reads in their home
                    await ctx.sandbox.write_file(ctx.paths.in_home(INSTRUCTIONS_FILE), ctx.instructions.encode(),
                                                 user="root", mode=0o444)
                ctx.sandbox.task_handler = commands.handle  # type: ignore[attr-defined]  # DockerSandbox's
                await open_ssh(ctx.sandbox, self.public_key)  # type: ignore[arg-type]
                relay = SshRelay(self.gate_dir, self.bind, self.port)
                self.port = await relay.start()
                update_session(self.store, self.attempt_id, port=self.port, state=commands.state)
                self.log(f"attempt {self.attempt_id}: ready on {self.bind}:{self.port} ({commands.state.value})")
                if self.on_ready is not None:
                    self.on_ready(self.port)
            while reason is None:
                sessions.poll(ctx)
                await asyncio.sleep(TICK_S)
                reason = self._stop_requested()
            ctx.recorder.event("note", message=f"stopped by the operator: {reason}", data={"by": "operator"})
            self.log(f"attempt {self.attempt_id}: stop requested ({reason})")
        finally:
            await asyncio.shield(self._close(ctx, relay, sessions))

    async def _close(self, ctx: AttemptContext, relay: Any, sessions: SessionLog) -> None:
        """Shut the gate: no connection, no key, no open session; then keep what the sessions recorded."""
        from rebench.sandbox.docker.ssh import close_ssh

        with contextlib.suppress(Exception):
            update_session(self.store, self.attempt_id, state=HumanState.ENDING)
        if relay is not None:
            with contextlib.suppress(Exception):
                await relay.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                await close_ssh(ctx.sandbox)  # type: ignore[arg-type]
        await asyncio.sleep(0.2)  # the gate writes its close lines as the sessions end
        with contextlib.suppress(Exception):
            sessions.poll(ctx)
        sessions.keep_all()

    def _load_scores(self, ctx: AttemptContext) -> None:
        """A resumed attempt's score log: its intermediate scores so far, as the expert saw them."""
        with self.store.session() as session:
            rows = session.scalars(select(ScoreEvent).where(
                ScoreEvent.attempt_id == self.attempt_id, ScoreEvent.kind == ScoreKind.INTERMEDIATE)
                .order_by(ScoreEvent.id))
            ctx.restore_scores([ScoreResult(raw=r.raw, message=r.message, duration_s=r.duration_s) for r in rows])


async def _heartbeat(store: Store, attempt_id: int) -> None:
    while True:
        with contextlib.suppress(Exception):
            update_session(store, attempt_id, heartbeat_at=datetime.now(UTC))
        await asyncio.sleep(HEARTBEAT_S)


def _reattacher(env: Any, container_id: str) -> Callable[[SandboxSpec], Any]:
    async def reattach(spec: SandboxSpec) -> Sandbox:
        from rebench.sandbox.docker import sandbox as docker_sandbox
        from rebench.sandboxes import resolve_spec

        # the image this checkout runs the environment in
        fresh = docker_sandbox.create_sandbox(resolve_spec("docker", spec, env), env)
        return await docker_sandbox.DockerSandbox.reattach(fresh.spec, container_id, engine=fresh.engine)

    return reattach


async def supervise(store: Store, attempt_id: int, *, resume: bool = False,
                    on_ready: Callable[[int], None] | None = None,
                    log: Callable[[str], None] = print) -> AttemptOutcome:
    """Run (or, with `resume`, carry on) one human attempt to its end."""
    from rebench.environments.registry import EnvironmentRegistry

    with store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        human = session.get_one(HumanSession, attempt_id)
        env_name, origin, container_id = attempt.environment, human.clock_origin, human.container_id
        heartbeat, gpus = human.heartbeat_at, list(human.gpus or [])
    update_session(store, attempt_id, supervisor_pid=os.getpid(), supervisor_host=socket.gethostname(),
                   heartbeat_at=datetime.now(UTC))
    beating = asyncio.create_task(_heartbeat(store, attempt_id))
    env = EnvironmentRegistry().get(env_name)
    runner = AttemptRunner(store, env, backend=BACKEND, snapshots_dir=store.snapshots_dir, gpus=gpus,
                           progress=lambda i, message: log(f"attempt {i}: {message}"))
    hooks = RunHooks(spec_update={"keep_alive": True, "gate_dir": None})
    try:
        with store.session() as session:
            hooks.spec_update["gate_dir"] = session.get_one(HumanSession, attempt_id).gate_dir
        if resume:
            if origin is None or container_id is None:
                raise RuntimeError(f"attempt {attempt_id} never got its sandbox running; nothing to resume")
            down_since = heartbeat.timestamp() if heartbeat is not None else time.time()
            restored = restore_clock(store, attempt_id, origin, down_since=down_since)
            hooks.clock = restored.clock
            hooks.reattach = _reattacher(env, container_id)
            hooks.agent = HumanAgent(store, attempt_id, restored=restored, on_ready=on_ready, log=log)
        else:
            hooks.clock = wall_clock()
            agent = HumanAgent(store, attempt_id, on_ready=on_ready, log=log)
            hooks.agent, hooks.on_started = agent, agent.on_started
        with leased(store, attempt_id, gpus, resume=resume, log=log):
            outcome = await runner.run(attempt_id, AgentConfig(name="human"), hooks)
    finally:
        beating.cancel()
    if outcome.status != AttemptStatus.RUNNING:  # the container is gone; what it recorded is kept
        update_session(store, attempt_id, state=HumanState.ENDED)
        gate_dir = hooks.spec_update.get("gate_dir")
        if gate_dir:
            shutil.rmtree(gate_dir, ignore_errors=True)
    log(f"attempt {attempt_id}: ended {outcome.status.value}"
        + (f" ({outcome.error_message})" if outcome.error_message else ""))
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rebench.human.supervisor",
                                     description="Supervise one human attempt (started by `rebench human`).")
    parser.add_argument("--db", required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    store = Store(args.db)

    def log(message: str) -> None:
        print(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} {message}", flush=True)

    try:
        outcome = asyncio.run(supervise(store, args.attempt, resume=args.resume, log=log))
    except Exception as exc:
        log(f"attempt {args.attempt}: supervisor failed: {type(exc).__name__}: {exc}")
        _mark_failed(store, args.attempt, f"{type(exc).__name__}: {exc}")
        return 1
    finally:
        store.close()
    return 0 if outcome.status.value in ("done", "limit") else 1


def _mark_failed(store: Store, attempt_id: int, message: str) -> None:
    """A supervisor that failed before the runner could write the row says why there."""
    from rebench.store.models import ErrorSource

    with contextlib.suppress(Exception), store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        if attempt.status in (AttemptStatus.QUEUED, AttemptStatus.RUNNING) and not _has_container(session, attempt_id):
            attempt.status, attempt.error_source = AttemptStatus.ERROR, ErrorSource.INFRASTRUCTURE
            attempt.error_message = message
            session.get_one(HumanSession, attempt_id).state = HumanState.ENDED


def _has_container(session: Any, attempt_id: int) -> bool:
    return session.get_one(HumanSession, attempt_id).container_id is not None


if __name__ == "__main__":
    sys.exit(main())
