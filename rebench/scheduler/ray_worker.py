"""The Ray executor's worker side: the task that runs one attempt on a node (rebench.scheduler.ray_executor
has the head's side). The usual AttemptRunner runs against a scratch database of its own (a copy of the
attempt's row and of the environment's calibrations), and the task, a streaming generator, yields what
that database gained every BATCH_S seconds for the head to write into the campaign's store.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.environments.metadata import EnvironmentMetadata
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.runner import AttemptRunner
from rebench.store.db import Store
from rebench.store.measurements import Calibration
from rebench.store.models import Attempt, Base, Campaign, Event, GatewayRequest, Pause, ScoreEvent

BATCH_S = 0.3
HEAD_ONLY = ("id", "campaign_id", "retry_of", "counted", "pid", "created_at")
"""Attempt columns the head owns: a worker's copy never overwrites them."""


def row_of(obj: Base) -> dict[str, Any]:
    return {column.key: getattr(obj, column.key) for column in obj.__table__.columns}


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
                rows = [row_of(r) for r in session.scalars(select(model).where(
                    model.attempt_id == self.attempt_id, model.id > self.last[name]).order_by(model.id))]
                if rows:
                    self.last[name] = rows[-1]["id"]
                    out[name] = rows
            pauses = session.scalars(select(Pause).where(Pause.attempt_id == self.attempt_id))
            out["pauses"] = [row_of(p) for p in pauses]
            attempt = row_of(session.get_one(Attempt, self.attempt_id))
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
