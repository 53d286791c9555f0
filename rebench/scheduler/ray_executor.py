"""The Ray executor (`rebench run --executor ray [--ray-address ADDR]`): each attempt is a Ray task
with the profile's CPUs, GPUs and memory, run on a worker node's own sandbox backend, while the
head process keeps the one SQLite store.

On the worker, the usual AttemptRunner runs against a scratch database of its own (a copy of
the attempt's row and of the environment's calibrations): nothing there writes the campaign's
database. The task is a streaming generator: every 0.3 s it yields what the scratch database
gained (events, score events, pauses, gateway requests, the attempt row's columns), and the
head writes each batch into the store in one transaction, with its own row ids (an event's
reference to a score event is mapped). So a lost worker loses at most the last 0.3 s, and its
attempt ends `error` with source `infrastructure`: the campaign retries it once, and the lost
try is no longer counted (rebench.campaign).

Ray is imported here only (`pip install 'rebench[ray]'`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.environments.metadata import EnvironmentMetadata
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.provenance import rebench_version
from rebench.runner import AttemptRunner, RunHooks
from rebench.scheduler.ray_connect import DEFAULT_TIMEOUT_S, join
from rebench.store.db import Store
from rebench.store.measurements import Calibration
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Base,
    Campaign,
    ErrorSource,
    Event,
    GatewayRequest,
    Pause,
    ScoreEvent,
)

BATCH_S = 0.3
FORWARDED_ENV = ("REBENCH_ENVIRONMENTS", "REBENCH_CACHE", "REBENCH_FAKE_GPUS", "REBENCH_LEASE_TIMEOUT_S")
"""Settings of this harness the workers need too (environments folder, build cache)."""
HEAD_ONLY = ("id", "campaign_id", "retry_of", "counted", "pid", "created_at")
"""Attempt columns the head owns: a worker's copy never overwrites them."""

_connected: list[str | None] = []


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RebenchError("--executor ray needs Ray: pip install 'rebench[ray]'") from None
    return ray


def connect(address: str | None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the cluster at `address` (None: start a Ray instance on this machine), once per process,
    within `timeout_s` (rebench.scheduler.ray_connect: a one-line RebenchError otherwise)."""
    ray = _ray()
    if _connected and ray.is_initialized():
        return
    env_vars = {key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}
    join(ray, address, timeout_s, env_vars)
    _connected.append(address)


def _row(obj: Base) -> dict[str, Any]:
    return {column.key: getattr(obj, column.key) for column in obj.__table__.columns}


# ---------------------------------------------------------------- the worker's side


class _Cursor:
    """What of the scratch database was already sent."""

    def __init__(self, store: Store, attempt_id: int) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.last: dict[str, int] = {"events": 0, "score_events": 0, "gateway_requests": 0}

    def batch(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        with self.store.session() as session:
            for name, model in (("events", Event), ("score_events", ScoreEvent), ("gateway_requests", GatewayRequest)):
                rows = [_row(r) for r in session.scalars(select(model).where(
                    model.attempt_id == self.attempt_id, model.id > self.last[name]).order_by(model.id))]
                if rows:
                    self.last[name] = rows[-1]["id"]
                    out[name] = rows
            out["pauses"] = [_row(p) for p in session.scalars(select(Pause).where(Pause.attempt_id == self.attempt_id))]
            attempt = _row(session.get_one(Attempt, self.attempt_id))
        out["attempt"] = {k: v for k, v in attempt.items() if k not in HEAD_ONLY}
        return out


def _scratch_store(folder: Path, payload: dict[str, Any]) -> Store:
    store = Store(folder / "attempt.db")
    with store.session() as session:
        session.add(Campaign(**payload["campaign"]))
        session.flush()
        session.add(Attempt(**{**payload["attempt"], "retry_of": None}))  # the tried row is not here
        session.add_all(Calibration(**row) for row in payload["calibrations"])
    return store


def run_on_worker(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Ray task's body: run the attempt here, yielding batches of rows for the head."""
    import ray

    folder = Path(tempfile.mkdtemp(prefix="rebench-ray-"))
    store = _scratch_store(folder, payload)
    env = Environment(root=Path(payload["env_root"]), metadata=EnvironmentMetadata.model_validate(payload["env"]))
    attempt_id = payload["attempt"]["id"]
    runner = AttemptRunner(store, env, backend=payload["backend"], snapshots_dir=Path(payload["snapshots_dir"]),
                           gpus=[int(g) for g in ray.get_gpu_ids()], network=payload["network"],
                           final_rule=payload["final_rule"], gateway_credit_usd=payload["credit"])
    result: list[AttemptOutcome | BaseException] = []

    def attempt() -> None:
        try:
            result.append(asyncio.run(runner.run(attempt_id, AgentConfig.model_validate(payload["agent"]))))
        except BaseException as exc:  # reported to the head as the attempt's failure
            result.append(exc)

    thread = threading.Thread(target=attempt, name="rebench-attempt")
    thread.start()
    cursor = _Cursor(store, attempt_id)
    try:
        while thread.is_alive():
            thread.join(BATCH_S)
            yield cursor.batch()
        final = cursor.batch()
        outcome = result[0] if result else RuntimeError("the attempt thread ended without an outcome")
        if isinstance(outcome, BaseException):
            raise RebenchError(f"the attempt failed on the worker: {type(outcome).__name__}: {outcome}")
        final["outcome"] = outcome.model_dump(mode="json")
        final["node"] = ray.get_runtime_context().get_node_id()
        yield final
    finally:
        store.close()
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- the head's side


class _Mirror:
    """Writes a worker's batches into the head's store, with the head's row ids."""

    def __init__(self, store: Store, attempt_id: int) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.scores: dict[int, int] = {}
        self.pauses: dict[int, int] = {}

    def apply(self, batch: dict[str, Any]) -> None:
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
            attempt = session.get_one(Attempt, self.attempt_id)
            for key, value in batch.get("attempt", {}).items():
                setattr(attempt, key, value)


class RayAttemptRunner(AttemptRunner):
    """An AttemptRunner whose `run` happens in a Ray task; the rows come back to this store."""

    address: str | None = None

    def _payload(self, attempt_id: int, config: AgentConfig) -> dict[str, Any]:
        with self.store.session() as session:
            attempt = session.get_one(Attempt, attempt_id)
            campaign = session.get(Campaign, attempt.campaign_id) if attempt.campaign_id else None
            calibrations = [_row(c) for c in session.scalars(select(Calibration).where(
                Calibration.environment == self.env.name, Calibration.env_version == self.env.version))]
            row = _row(attempt)
        if campaign is None:
            raise RebenchError(f"attempt {attempt_id} belongs to no campaign: the Ray executor runs campaigns")
        return {
            "attempt": row, "campaign": {"id": campaign.id, "spec": campaign.spec}, "calibrations": calibrations,
            "env_root": str(self.env.root), "env": self.env.metadata.model_dump(mode="json"),
            "backend": self.backend, "snapshots_dir": str(self.snapshots_dir), "network": self.network,
            "final_rule": self.final_rule, "credit": self.gateway_credit_usd, "agent": config.model_dump(mode="json"),
        }

    async def run(self, attempt_id: int, config: AgentConfig, hooks: RunHooks | None = None) -> AttemptOutcome:
        if hooks is not None:
            raise RebenchError("human attempts do not run on the Ray executor")
        ray = _ray()
        connect(self.address)
        profile_name = self._profile(attempt_id)
        profile = self.env.profile(profile_name)
        task = ray.remote(run_on_worker).options(
            num_cpus=profile.resources.cpus, num_gpus=profile.resources.gpus,
            memory=int(profile.resources.memory_gb * 1e9), max_retries=0, name=f"rebench-attempt-{attempt_id}")
        self._update(attempt_id, status=AttemptStatus.RUNNING, started_at=datetime.now(UTC), backend=self.backend,
                     rebench_version=rebench_version(), env_hash=self.env.content_hash(profile_name))
        mirror = _Mirror(self.store, attempt_id)
        self.progress(attempt_id, "queued on the Ray cluster")
        generator = task.remote(self._payload(attempt_id, config))
        outcome: AttemptOutcome | None = None
        try:
            async for ref in generator:
                batch = await ref
                mirror.apply(batch)
                if "outcome" in batch:
                    outcome = AttemptOutcome.model_validate(batch["outcome"])
                    self.progress(attempt_id, f"ran on Ray node {str(batch.get('node'))[:12]}")
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # the worker's sandbox stops with its process
                ray.cancel(generator, force=True)
            raise
        except (ray.exceptions.RayError, RebenchError) as exc:
            outcome = self._lost(attempt_id, f"the Ray worker was lost: {type(exc).__name__}: {_first_line(exc)}")
        if outcome is None:
            outcome = self._lost(attempt_id, "the Ray task ended without an outcome")
        return outcome

    def _profile(self, attempt_id: int) -> str:
        with self.store.session() as session:
            return session.get_one(Attempt, attempt_id).profile

    def _lost(self, attempt_id: int, message: str) -> AttemptOutcome:
        self._update(attempt_id, status=AttemptStatus.ERROR, error_source=ErrorSource.INFRASTRUCTURE,
                     error_message=message, ended_at=datetime.now(UTC))
        with self.store.session() as session:
            row = session.get_one(Attempt, attempt_id)
            environment, agent = row.environment, row.agent
        return AttemptOutcome(attempt_id=attempt_id, status=AttemptStatus.ERROR, environment=environment, agent=agent,
                              error_source=ErrorSource.INFRASTRUCTURE, error_message=message)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def ray_runner(address: str | None) -> type[RayAttemptRunner]:
    """The AttemptRunner class for a campaign on the cluster at `address`."""
    _ray()
    return type("BoundRayAttemptRunner", (RayAttemptRunner,), {"address": address})


def wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Until `count` alive nodes are in the cluster this process is connected to (tests, scripts)."""
    ray = _ray()
    deadline = time.monotonic() + timeout_s
    while sum(1 for node in ray.nodes() if node["Alive"]) < count:
        if time.monotonic() > deadline:
            raise RebenchError(f"the Ray cluster did not reach {count} nodes in {timeout_s:.0f} s")
        time.sleep(0.2)
