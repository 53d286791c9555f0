"""Tables of `rebench rescore` (rebench.rescoring): re-scores live beside the original score rows,
never in them, so an attempt's history stays what it was and each re-score says what made it."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from rebench.store.models import Base, EnumString, utcnow


class RescoreRunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    """Every attempt of the run has its row."""
    INCOMPLETE = "incomplete"
    """The process ended with attempts left (an error); the same command again finishes them."""


class RescoreStatus(StrEnum):
    DONE = "done"
    SKIPPED = "skipped"


class RescoreRun(Base):
    """One `rebench rescore` over a fixed list of attempts, on one machine and backend."""

    __tablename__ = "rescore_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[RescoreRunStatus] = mapped_column(EnumString(RescoreRunStatus, 16),
                                                     default=RescoreRunStatus.RUNNING)
    selection: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """What was asked (`{"attempts": [...]}`, `{"campaign": N}` or `{"environments": [...]}`): a second
    call with the same selection, environments and machine resumes this run."""
    attempt_ids: Mapped[list[Any]] = mapped_column(JSON, default=list)
    backend: Mapped[str] = mapped_column(String(16))
    hardware: Mapped[str] = mapped_column(String(64))
    hardware_description: Mapped[str] = mapped_column(Text, default="")
    environments: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    """Per `environment/profile`: version, content hash (scorer, data, anchors declared) and the
    anchors in force when the run started."""
    kit_version: Mapped[str] = mapped_column(String(64), default="")
    parallel: Mapped[int] = mapped_column(Integer, default=1)
    pid: Mapped[int | None] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(255))


class Rescore(Base):
    """One attempt re-scored (or skipped, with the reason) by one run."""

    __tablename__ = "rescores"
    __table_args__ = (UniqueConstraint("run_id", "attempt_id", name="uq_rescore_run_attempt"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("rescore_runs.id"), index=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    status: Mapped[RescoreStatus] = mapped_column(EnumString(RescoreStatus, 16))
    reason: Mapped[str | None] = mapped_column(Text)
    rule: Mapped[str | None] = mapped_column(String(16))
    """What was re-scored (rebench.rescoring.plan): `rescore_best`: the snapshots that rule re-scores, the best
    median counts; `best`: each valid score call's snapshot, the best counts; `final`: the solution it ended with."""
    env_version: Mapped[str | None] = mapped_column(String(32))
    content_hash: Mapped[str | None] = mapped_column(String(64))
    final_raw: Mapped[float | None] = mapped_column(Float)
    final_normalized: Mapped[float | None] = mapped_column(Float)
    anchors_start: Mapped[float | None] = mapped_column(Float)
    anchors_reference: Mapped[float | None] = mapped_column(Float)
    anchors_kind: Mapped[str | None] = mapped_column(String(16))
    heldout_raw: Mapped[float | None] = mapped_column(Float)
    """Profiles with `final_split`: the solution the attempt's held-out final scored, scored again on that split."""
    heldout_normalized: Mapped[float | None] = mapped_column(Float)
    scores: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """Every score call of the re-scoring: kind, raw, valid, message, and which snapshot."""
    skipped_snapshots: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """Lines: snapshots not re-scored and why, and under `best` why the final solution stood in for the calls'."""
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
