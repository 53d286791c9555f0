"""The Ray executor (`rebench run --executor ray [--ray-address ADDR]`): each attempt is a Ray task
with the profile's CPUs, GPUs and memory, run on a worker node's own sandbox backend, while the
head process keeps the one SQLite store.

On the worker (rebench.scheduler.ray_worker), the usual AttemptRunner runs against a scratch
database of its own (a copy of the attempt's row and of the environment's calibrations): nothing
there writes the campaign's database. The task is a streaming generator: every 0.3 s it yields
what the scratch database gained (events, score events, pauses, gateway requests, the attempt row's columns), and the
head writes each batch into the store in one transaction, with its own row ids (an event's
reference to a score event is mapped). The attempt's files (snapshots, an installed agent's model-call
bodies and session logs) are written on the worker into a folder of its own and come back in the same
batches (rebench.scheduler.ray_artefacts): the head writes them into its own snapshot folder, under
the name its own runner would have used, and the paths in the rows name them there.

So a lost worker loses at most the last 0.3 s (and the files not yet sent), and its attempt ends
`error` with source `infrastructure`: the campaign retries it once, and the lost try is no longer
counted (rebench.campaign). The head's Ray driver is a process of its own
(rebench.scheduler.ray_driver): when the cluster itself is lost, the attempts in flight end
`error` (infrastructure) without a retry, and the campaign stops for `rebench run --resume`.

The harness process itself never imports Ray (`pip install 'rebench[ray]'`), but for
`wait_for_nodes`, which tests and scripts call in a process that joined a cluster itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import importlib.util
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.errors import RebenchError
from rebench.provenance import rebench_version
from rebench.runner import AttemptRunner, RunHooks
from rebench.scheduler.ray_artefacts import Inbox, rebase
from rebench.scheduler.ray_connect import DEFAULT_TIMEOUT_S, check_reachable, ray_log_path
from rebench.scheduler.ray_driver import RayDriver
from rebench.scheduler.ray_node_prep import keys_to_send, price_tables
from rebench.scheduler.ray_worker import row_of
from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.measurements import Calibration
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Campaign,
    ErrorSource,
    Event,
    EventKind,
    GatewayRequest,
    Pause,
    ScoreEvent,
)

FORWARDED_ENV = ("REBENCH_ENVIRONMENTS", "REBENCH_FAKE_GPUS", "REBENCH_LEASE_TIMEOUT_S")
"""Settings of this harness the workers need too (the environments folder). Not REBENCH_CACHE: each node
keeps its builds, logs and reap marks in its own (set where its `ray start` runs)."""

BACKPRESSURE = 8
"""Batches a worker may have yielded that the head has not taken yet (each carries up to 4 MiB of files)."""

_drivers: list[RayDriver] = []
"""This process's driver (one per harness process; closed at exit)."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RebenchError("--executor ray needs Ray: pip install 'rebench[ray]'") from None
    return ray


def _check_installed() -> None:
    """Ray is there to run the driver (not imported here: the harness never hosts Ray's core)."""
    if importlib.util.find_spec("ray") is None:
        raise RebenchError("--executor ray needs Ray: pip install 'rebench[ray]'")


def connect(address: str | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> RayDriver:
    """Join the cluster at `address` (None: start a Ray instance on this machine, which lives as long
    as this process) through a driver process, once per process, within `timeout_s` (a one-line
    RebenchError otherwise, with nothing left running)."""
    _check_installed()
    if _drivers and _drivers[0].address == address:
        return _drivers[0]
    if address is not None:
        check_reachable(address, timeout_s)
    env_vars = {key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}
    driver = RayDriver(address, timeout_s, env_vars, ray_log_path())
    driver.start()
    for old in _drivers:
        old.close()
    _drivers[:] = [driver]
    atexit.register(driver.close)
    return driver


# ---------------------------------------------------------------- the head's side


class _Mirror:
    """Writes a worker's batches into the head's store, with the head's row ids, and its files into the
    head's snapshot folder (`inbox`), the rows' paths rewritten from the worker's folder to that one."""

    def __init__(self, store: Store, attempt_id: int, inbox: Inbox) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.inbox = inbox
        self.scores: dict[int, int] = {}
        self.pauses: dict[int, int] = {}

    def apply(self, batch: dict[str, Any]) -> None:
        self.inbox.apply(batch.get("files", []))
        root = batch.get("root")
        if isinstance(root, str) and root.startswith("/"):
            batch = rebase({k: v for k, v in batch.items() if k != "files"}, root.rstrip("/"), str(self.inbox.root))
        with self.store.session() as session:
            for row in batch.get("score_events", []):
                score = ScoreEvent(**{k: v for k, v in row.items() if k != "id"})
                session.add(score)
                session.flush()
                self.scores[row["id"]] = score.id
            for row in batch.get("events", []):
                data = dict(row["data"])
                if isinstance(data.get("score_id"), int):
                    data["score_id"] = self.scores.get(data["score_id"], data["score_id"])
                session.add(Event(**{k: v for k, v in row.items() if k not in ("id", "data")}, data=data))
            for row in batch.get("gateway_requests", []):
                session.add(GatewayRequest(**{k: v for k, v in row.items() if k != "id"}))
            for row in batch.get("pauses", []):
                known = self.pauses.get(row["id"])
                pause = session.get(Pause, known) if known is not None else None
                if pause is None:
                    pause = Pause(attempt_id=self.attempt_id, reason=row["reason"], start_s=row["start_s"])
                    session.add(pause)
                    session.flush()
                    self.pauses[row["id"]] = pause.id
                pause.end_s = row["end_s"]
            for row in batch.get("calibrations", []):  # a node's own, made before its first attempt
                same = (Calibration.environment == row["environment"], Calibration.env_version == row["env_version"],
                        Calibration.profile == row["profile"], Calibration.hardware == row["hardware"],
                        Calibration.start_raw == row["start_raw"], Calibration.reference_raw == row["reference_raw"])
                if session.scalar(select(Calibration.id).where(*same).limit(1)) is None:
                    session.add(Calibration(**row))
            attempt = session.get_one(Attempt, self.attempt_id)
            for key, value in batch.get("attempt", {}).items():
                setattr(attempt, key, value)

    def close(self) -> None:
        """Half-received files are dropped; what was refused becomes a note in the attempt's record."""
        self.inbox.close()
        if not self.inbox.refused:
            return
        with self.store.session() as session:
            seq = session.scalar(select(func.max(Event.seq)).where(Event.attempt_id == self.attempt_id)) or 0
            note = validate_event("note", {
                "message": f"{len(self.inbox.refused)} file item(s) from the Ray worker were not written",
                "data": {"refused": self.inbox.refused[:50]}})
            session.add(Event(attempt_id=self.attempt_id, seq=seq + 1, kind=EventKind.NOTE, data=note))


class RayAttemptRunner(AttemptRunner):
    """An AttemptRunner whose `run` happens in a Ray task; the rows come back to this store."""

    address: str | None = None
    calibrate: bool = True
    """Each node calibrates a timing environment before its first attempt (rebench.scheduler.ray_node_prep)."""
    run_id: str = ""
    """This campaign run's name for the nodes' kept calibrations."""

    def _reserve(self, attempt_id: int) -> Path:
        """The attempt's snapshot folder on the head, made now so that no other database's attempt of the
        same number takes the name while the files are on their way."""
        while True:
            base = self._snapshot_base(attempt_id)
            base.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                base.mkdir()
                return base

    def _payload(self, attempt_id: int, config: AgentConfig, snapshot_name: str) -> dict[str, Any]:
        with self.store.session() as session:
            attempt = session.get_one(Attempt, attempt_id)
            campaign = session.get(Campaign, attempt.campaign_id) if attempt.campaign_id else None
            calibrations = [row_of(c) for c in session.scalars(select(Calibration).where(
                Calibration.environment == self.env.name, Calibration.env_version == self.env.version))]
            row = row_of(attempt)
        gateway = self.env.profile(row["profile"]).gateway
        if campaign is None:
            raise RebenchError(f"attempt {attempt_id} belongs to no campaign: the Ray executor runs campaigns")
        return {
            "attempt": row, "campaign": {"id": campaign.id, "spec": campaign.spec}, "calibrations": calibrations,
            "env_root": str(self.env.root), "env": self.env.metadata.model_dump(mode="json"),
            "backend": self.backend, "snapshot_name": snapshot_name, "network": self.network,
            "final_rule": self.final_rule, "credit": self.gateway_credit_usd, "agent": config.model_dump(mode="json"),
            "keys": keys_to_send(config, gateway), "prices": price_tables(config).model_dump(),
            "calibrate": self.calibrate, "run": self.run_id,
        }

    async def run(self, attempt_id: int, config: AgentConfig, hooks: RunHooks | None = None) -> AttemptOutcome:
        if hooks is not None:
            raise RebenchError("human attempts do not run on the Ray executor")
        driver = connect(self.address)
        if driver.lost is not None:
            return self._lost(attempt_id, f"the Ray cluster was lost: {driver.lost}", stop=True)
        profile_name = self._profile(attempt_id)
        profile = self.env.profile(profile_name)
        options = {"num_cpus": profile.resources.cpus, "num_gpus": profile.resources.gpus,
                   "memory": int(profile.resources.memory_gb * 1e9), "max_retries": 0,
                   "name": f"rebench-attempt-{attempt_id}", "_generator_backpressure_num_objects": BACKPRESSURE}
        self._update(attempt_id, status=AttemptStatus.RUNNING, started_at=datetime.now(UTC), backend=self.backend,
                     rebench_version=rebench_version(), env_hash=self.env.content_hash(profile_name))
        base = self._reserve(attempt_id)
        mirror = _Mirror(self.store, attempt_id, Inbox(self.snapshots_dir, (base.name, f"{base.name}-agent")))
        self.progress(attempt_id, "queued on the Ray cluster")
        try:
            replies = driver.submit(attempt_id, self._payload(attempt_id, config, base.name), options)
            while True:
                kind, detail = await replies.get()
                if kind == "batch":
                    mirror.apply(detail)
                    if isinstance(detail.get("progress"), str):
                        self.progress(attempt_id, detail["progress"])
                    if "outcome" in detail:
                        self.progress(attempt_id, f"ran on Ray node {str(detail.get('node'))[:12]}")
                        return AttemptOutcome.model_validate(detail["outcome"])
                elif kind == "lost":
                    return self._lost(attempt_id, f"the Ray worker was lost: {detail}")
                elif kind == "cluster_lost":
                    return self._lost(attempt_id, f"the Ray cluster was lost: {detail}", stop=True)
                else:  # "end" without an outcome
                    return self._lost(attempt_id, "the Ray task ended without an outcome")
        except asyncio.CancelledError:
            driver.cancel(attempt_id)  # the worker's sandbox stops with its process
            self._update(attempt_id, status=AttemptStatus.INTERRUPTED, error_source=ErrorSource.USER,
                         error_message="interrupted by the user", ended_at=datetime.now(UTC))
            raise
        finally:
            driver.forget(attempt_id)
            mirror.close()
            with contextlib.suppress(OSError):
                base.rmdir()  # only when nothing came: a local attempt without a snapshot leaves none either

    def _profile(self, attempt_id: int) -> str:
        with self.store.session() as session:
            return session.get_one(Attempt, attempt_id).profile

    def _lost(self, attempt_id: int, message: str, *, stop: bool = False) -> AttemptOutcome:
        """The try ends `error` (infrastructure). With `stop` (the cluster is gone, so a retry would fail
        alike) the campaign stops and `rebench run --resume` retries it; otherwise the campaign does."""
        self._update(attempt_id, status=AttemptStatus.ERROR, error_source=ErrorSource.INFRASTRUCTURE,
                     error_message=message, ended_at=datetime.now(UTC))
        with self.store.session() as session:
            row = session.get_one(Attempt, attempt_id)
            environment, agent, campaign = row.environment, row.agent, row.campaign_id
        stopped = f"{message}; go on with `rebench run --resume {campaign}`" if stop else None
        return AttemptOutcome(attempt_id=attempt_id, status=AttemptStatus.ERROR, environment=environment, agent=agent,
                              error_source=ErrorSource.INFRASTRUCTURE, error_message=message,
                              stop_campaign=stopped)


def ray_runner(address: str | None, *, calibrate: bool = True) -> type[RayAttemptRunner]:
    """The AttemptRunner class for a campaign run on the cluster at `address`."""
    _check_installed()
    return type("BoundRayAttemptRunner", (RayAttemptRunner,),
                {"address": address, "calibrate": calibrate, "run_id": uuid.uuid4().hex})


def wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Until `count` alive nodes are in the cluster this process is connected to (tests, scripts)."""
    ray = _ray()
    deadline = time.monotonic() + timeout_s
    while sum(1 for node in ray.nodes() if node["Alive"]) < count:
        if time.monotonic() > deadline:
            raise RebenchError(f"the Ray cluster did not reach {count} nodes in {timeout_s:.0f} s")
        time.sleep(0.2)
