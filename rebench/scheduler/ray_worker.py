"""The Ray executor's worker side: the task that runs one attempt on a node (rebench.scheduler.ray_executor
has the head's side). The usual AttemptRunner runs against a scratch database of its own (a copy of the
attempt's row and of the environment's calibrations), and the task, a streaming generator, yields what
that database gained every BATCH_S seconds for the head to write into the campaign's store, with
the files the attempt wrote into a folder of the worker's own (rebench.scheduler.ray_artefacts).

Calibrated anchors mean something only on the hardware they were measured on: the scratch database
gets only the calibrations of this node's hardware fingerprint as this node computes it, so an
attempt here is normalized with those, its window's anchors, one the node measures first
(rebench.scheduler.ray_node_prep) or, with `--no-calibrate`, the declared ones, never a
calibration of the head's (or another node's) hardware. The attempt's last event, a note, names the
node, its hardware and the anchors used (as the row's `anchors_kind` does).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from rebench.agents.base import AgentConfig
from rebench.attempt_outcome import AttemptOutcome
from rebench.calibration import HardwareFingerprint, hardware_fingerprint
from rebench.environments.metadata import EnvironmentMetadata
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.runner import AttemptRunner
from rebench.scheduler.node_reap import reap_once_on_node
from rebench.scheduler.ray_artefacts import Outbox
from rebench.scheduler.ray_node_prep import (
    NodeCalibration,
    PriceTables,
    calibrate_node,
    needs_calibration,
    use_keys,
    use_price_tables,
)
from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.measurements import Calibration
from rebench.store.models import Attempt, Base, Campaign, Event, EventKind, GatewayRequest, Pause, ScoreEvent

BATCH_S = 0.3
HEAD_ONLY = ("id", "campaign_id", "retry_of", "counted", "pid", "created_at")
"""Attempt columns the head owns: a worker's copy never overwrites them."""


def row_of(obj: Base) -> dict[str, Any]:
    return {column.key: getattr(obj, column.key) for column in obj.__table__.columns}


class _Cursor:
    """What of the scratch database was already sent."""

    def __init__(self, store: Store, attempt_id: int, outbox: Outbox) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self.outbox = outbox
        self.last: dict[str, int] = {"events": 0, "score_events": 0, "gateway_requests": 0}
        self.calibrations: list[dict[str, Any]] = []
        """The node's calibration made for this attempt, sent once."""

    def batch(self, files: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"root": str(self.outbox.root), "files": files}
        if self.calibrations:
            out["calibrations"], self.calibrations = self.calibrations, []
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


class _WorkerRunner(AttemptRunner):
    """The snapshot folder's name is the head's choice (`attempt-N` or `attempt-N.K` where the head has
    an `attempt-N` already), so the files land where the head's own runner would have put them."""

    snapshot_name = ""

    def _snapshot_base(self, attempt_id: int) -> Path:
        return self.snapshots_dir / self.snapshot_name


def _scratch_store(folder: Path, payload: dict[str, Any], hardware: str) -> Store:
    """The attempt's row, its campaign's, and the environment's calibrations of this node's hardware."""
    store = Store(folder / "attempt.db")
    with store.session() as session:
        session.add(Campaign(**payload["campaign"]))
        session.flush()
        session.add(Attempt(**{**payload["attempt"], "retry_of": None}))  # the tried row is not here
        session.add_all(Calibration(**row) for row in payload["calibrations"] if row["hardware"] == hardware)
    return store


def _where_it_ran(store: Store, attempt_id: int, node: str, hardware: HardwareFingerprint,
                  calibrated: NodeCalibration | None) -> None:
    """The attempt's record says which node ran it, on what hardware, and which anchors that gave."""
    with store.session() as session:
        attempt = session.get_one(Attempt, attempt_id)
        seq = session.scalar(select(func.max(Event.seq)).where(Event.attempt_id == attempt_id)) or 0
        anchors = attempt.anchors_kind or "none"
        measured = "" if calibrated is None else " (this node's, measured for this campaign run)"
        message = f"ran on Ray node {node} ({hardware.description}); {anchors} anchors{measured}"
        session.add(Event(attempt_id=attempt_id, seq=seq + 1, kind=EventKind.NOTE, working_s=attempt.working_s,
                          data=validate_event("note", {
                              "message": message,
                              "data": {"ray_node": node, "hardware": hardware.key,
                                       "hardware_description": hardware.description, "anchors_kind": anchors,
                                       "calibrated_on_node": calibrated is not None}})))


def run_on_worker(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The Ray task's body: run the attempt here, yielding batches of rows for the head."""
    import ray

    reap_once_on_node(ray.get_runtime_context().get_node_id(), payload["backend"])  # what a lost worker left
    use_keys(payload.get("keys", {}))
    config = use_price_tables(PriceTables.model_validate(payload.get("prices", {})),
                              AgentConfig.model_validate(payload["agent"]))
    folder = Path(tempfile.mkdtemp(prefix="rebench-ray-"))
    hardware = hardware_fingerprint()
    store = _scratch_store(folder, payload, hardware.key)
    env = Environment(root=Path(payload["env_root"]), metadata=EnvironmentMetadata.model_validate(payload["env"]))
    attempt_id = payload["attempt"]["id"]
    calibrated = None
    profile = payload["attempt"]["profile"]
    if payload.get("calibrate") and needs_calibration(store, env, profile, hardware.key):
        yield {"progress": f"calibrating {env.name} on Ray node {ray.get_runtime_context().get_node_id()[:12]}"}
        try:
            calibrated = calibrate_node(store, env, profile, payload["backend"], payload["run"], hardware.key)
        except Exception as exc:  # the node cannot score the environment's own solutions
            store.close()
            shutil.rmtree(folder, ignore_errors=True)
            raise RebenchError(f"calibrating {env.name} on this node failed: {exc}") from exc
    snapshots = folder / "snapshots"  # this node's disk: the head gets the files in the batches
    snapshots.mkdir()
    runner = _WorkerRunner(store, env, backend=payload["backend"], snapshots_dir=snapshots,
                           gpus=[int(g) for g in ray.get_gpu_ids()], network=payload["network"],
                           final_rule=payload["final_rule"], gateway_credit_usd=payload["credit"])
    runner.snapshot_name = payload["snapshot_name"]
    node = ray.get_runtime_context().get_node_id()
    result: list[AttemptOutcome | BaseException] = []

    def attempt() -> None:
        try:
            result.append(asyncio.run(runner.run(attempt_id, config)))
        except BaseException as exc:  # reported to the head as the attempt's failure
            result.append(exc)

    thread = threading.Thread(target=attempt, name="rebench-attempt")
    thread.start()
    outbox = Outbox(snapshots)
    cursor = _Cursor(store, attempt_id, outbox)
    if calibrated is not None:
        cursor.calibrations.append(calibrated.model_dump())
    try:
        while thread.is_alive():
            thread.join(0 if outbox.pending() else BATCH_S)
            yield cursor.batch(outbox.take())
        _where_it_ran(store, attempt_id, node, hardware, calibrated)
        outbox.scan(final=True)
        while outbox.pending():  # the last of the files, before the outcome ends the attempt on the head
            yield cursor.batch(outbox.take())
        final = cursor.batch([])
        outcome = result[0] if result else RuntimeError("the attempt thread ended without an outcome")
        if isinstance(outcome, BaseException):
            raise RebenchError(f"the attempt failed on the worker: {type(outcome).__name__}: {outcome}")
        final["outcome"] = outcome.model_dump(mode="json")
        final["node"] = node
        yield final
    finally:
        outbox.close()
        store.close()
        shutil.rmtree(folder, ignore_errors=True)
