"""ORM tables. Raw scores are the source of truth; normalized values are derived.

Statuses, error sources, score kinds and limit reasons are StrEnums: the columns
stay plain strings in SQLite (no schema change), but a value outside the enum
cannot be written, and what is read back is the enum member.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from rebench.network import NetworkPolicy


class AttemptStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    LIMIT = "limit"
    ERROR = "error"
    INTERRUPTED = "interrupted"


class CampaignStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"


class ErrorSource(StrEnum):
    """Who is to blame for a failed attempt (None when nothing failed)."""

    AGENT = "agent"
    ENVIRONMENT = "environment"
    INFRASTRUCTURE = "infrastructure"
    USER = "user"


class LimitReason(StrEnum):
    TIME = "time"
    TOKENS = "tokens"
    COST = "cost"
    DISK = "disk"


class ScoreKind(StrEnum):
    BASELINE = "baseline"
    INTERMEDIATE = "intermediate"
    FINAL = "final"
    RESCORE = "rescore"
    """A re-score of a kept snapshot after the attempt ended (final_score = "rescore_best")."""
    ANCHOR_START = "anchor_start"
    """The starting solution, scored in the re-scoring window beside the candidates (rebench.scoring.window)."""
    ANCHOR_REFERENCE = "anchor_reference"
    """The reference solution, scored in the re-scoring window beside the candidates."""
    HELDOUT = "heldout"
    """The final solution scored after the attempt on the profile's held-out split (`final_split`)."""


class EventKind(StrEnum):
    """What an event row records; its payload's schema is in rebench.store.events."""

    # written by the harness
    START = "start"
    BASH = "bash"
    PYTHON = "python"
    READ_FILE = "read_file"
    WRITE_FILE = "write_file"
    UPLOAD_DIR = "upload_dir"
    SCORE = "score"
    SCORE_LOG = "score_log"
    SUBMIT = "submit"
    SLEEP = "sleep"
    MODEL_CALL = "model_call"
    LIMIT = "limit"
    AGENT_ERROR = "agent_error"
    SNAPSHOT = "snapshot"
    # logged by agents through ctx.log_event
    MODEL_ERROR = "model-error"
    PROVIDER_RETRY = "provider-retry"
    BUDGET_SPENT = "budget_spent"
    AGENT_GAVE_UP = "agent_gave_up"
    TOOL_RESULT = "tool_result"
    CONTEXT_TRIMMED = "context_trimmed"
    CONTEXT_TARGET_REDUCED = "context_target_reduced"
    AIDE_NODE = "aide_node"
    """One node of the aide agent's solution tree (rebench.agents.aide)."""
    NOTE = "note"
    """Free-form note for agents outside this package: a message and a JSON object."""
    # human attempts (rebench.human)
    TASK = "task"
    """A `task` command an expert ran inside the sandbox (start, pause, resume, status, ...)."""
    SSH_SESSION = "ssh_session"
    """One SSH session of an expert, with where its recording is."""


ATTEMPT_STATUSES = tuple(s.value for s in AttemptStatus)
ERROR_SOURCES = tuple(s.value for s in ErrorSource)
FINISHED_STATUSES = (AttemptStatus.DONE, AttemptStatus.LIMIT, AttemptStatus.ERROR, AttemptStatus.INTERRUPTED)


E = TypeVar("E", bound=StrEnum)


class EnumString(TypeDecorator[E]):
    """A StrEnum stored as its plain string value: writing anything else raises, reading gives the member."""

    impl = String
    cache_ok = True

    def __init__(self, enum: type[E], length: int) -> None:
        super().__init__(length)
        self.enum = enum

    def process_bind_param(self, value: E | str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        try:
            return self.enum(value).value
        except ValueError:
            allowed = ", ".join(m.value for m in self.enum)
            raise ValueError(f"invalid {self.enum.__name__} {value!r}; allowed: {allowed}") from None

    def process_result_value(self, value: str | None, dialect: Dialect) -> E | None:
        return None if value is None else self.enum(value)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


class Campaign(Base):
    """One `rebench run` invocation: environments x agent x budget x k."""

    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[CampaignStatus] = mapped_column(EnumString(CampaignStatus, 16), default=CampaignStatus.RUNNING)
    concurrency: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """How many attempts run at once and what bounds it (rebench.scheduler.concurrency.Concurrency),
    written before the first one starts."""

    attempts: Mapped[list[Attempt]] = relationship(back_populates="campaign")


class Attempt(Base):
    """One attempt of one agent (or human) at one environment under one budget."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("import_sha256", "import_row", name="uq_attempt_import_provenance"),
        # one attempt per run of an outside source: re-importing a run, from any file, adds nothing
        Index("uq_attempt_source_external_id", "source", "external_id", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), index=True)
    source: Mapped[str] = mapped_column(String(16), default="own")  # own | imported
    environment: Mapped[str] = mapped_column(String(64), index=True)
    env_version: Mapped[str] = mapped_column(String(32), default="")
    profile: Mapped[str] = mapped_column(String(32), default="")
    agent: Mapped[str] = mapped_column(String(128), index=True)
    model: Mapped[str | None] = mapped_column(String(128))
    budget_s: Mapped[float] = mapped_column(Float)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    backend: Mapped[str | None] = mapped_column(String(16))
    network: Mapped[NetworkPolicy] = mapped_column(
        EnumString(NetworkPolicy, 8), default=NetworkPolicy.NONE, server_default=NetworkPolicy.NONE.value
    )
    """The sandbox's network (rebench.network): results with and without one are not comparable.
    Imported METR runs are `full` (RE-Bench gave every task internet access)."""
    image_id: Mapped[str | None] = mapped_column(String(128))
    rebench_version: Mapped[str | None] = mapped_column(String(32))
    """The rebench that ran the attempt (set when it starts; NULL for imported and older attempts)."""
    env_hash: Mapped[str | None] = mapped_column(String(16))
    """The environment folder's content hash for the attempt's profile (`Environment.content_hash`),
    the key of the image and assets it ran on."""
    status: Mapped[AttemptStatus] = mapped_column(
        EnumString(AttemptStatus, 16), default=AttemptStatus.QUEUED, index=True
    )
    waiting_for: Mapped[str | None] = mapped_column(String(64))
    """While queued: what it waits for (CPUs, memory, GPUs, a --parallel slot); rebench.scheduler.queue."""
    error_source: Mapped[ErrorSource | None] = mapped_column(EnumString(ErrorSource, 16))
    error_message: Mapped[str | None] = mapped_column(Text)
    limit_reason: Mapped[LimitReason | None] = mapped_column(EnumString(LimitReason, 32))
    retry_of: Mapped[int | None] = mapped_column(ForeignKey("attempts.id"))
    counted: Mapped[bool] = mapped_column(Boolean, default=True)
    pid: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    wall_s: Mapped[float] = mapped_column(Float, default=0.0)
    working_s: Mapped[float] = mapped_column(Float, default=0.0)
    model_wait_s: Mapped[float] = mapped_column(Float, default=0.0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    submitted: Mapped[bool] = mapped_column(Boolean, default=False)
    final_raw: Mapped[float | None] = mapped_column(Float)
    final_normalized: Mapped[float | None] = mapped_column(Float)
    final_rule: Mapped[str | None] = mapped_column(String(16))  # best | last | rescore_best
    # RE-Bench's own rule (best or last intermediate score), kept beside a re-scored final
    rule_raw: Mapped[float | None] = mapped_column(Float)
    rule_normalized: Mapped[float | None] = mapped_column(Float)
    anchors_kind: Mapped[str | None] = mapped_column(String(16))  # declared | calibrated | window | imported
    snapshot_path: Mapped[str | None] = mapped_column(Text)
    import_sha256: Mapped[str | None] = mapped_column(String(64))
    import_row: Mapped[int | None] = mapped_column(Integer)
    external_id: Mapped[str | None] = mapped_column(String(128))

    campaign: Mapped[Campaign | None] = relationship(back_populates="attempts")
    events: Mapped[list[Event]] = relationship(back_populates="attempt", order_by="Event.seq")
    score_events: Mapped[list[ScoreEvent]] = relationship(back_populates="attempt", order_by="ScoreEvent.id")
    pauses: Mapped[list[Pause]] = relationship(back_populates="attempt", order_by="Pause.id")


class Event(Base):
    """One thing that happened in an attempt: a tool call, a model call, a note."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[EventKind] = mapped_column(EnumString(EventKind, 32))
    working_s: Mapped[float] = mapped_column(Float, default=0.0)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    attempt: Mapped[Attempt] = relationship(back_populates="events")


class ScoreEvent(Base):
    """One score call: raw score (None = invalid), when in working time, and what was shown."""

    __tablename__ = "score_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    kind: Mapped[ScoreKind] = mapped_column(EnumString(ScoreKind, 16), default=ScoreKind.INTERMEDIATE)
    working_s: Mapped[float] = mapped_column(Float, default=0.0)
    raw: Mapped[float | None] = mapped_column(Float)
    valid: Mapped[bool] = mapped_column(Boolean, default=False)
    message: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    attempt: Mapped[Attempt] = relationship(back_populates="score_events")


class Pause(Base):
    """A stretch of wall time that did not count against the budget, with its reason."""

    __tablename__ = "pauses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    reason: Mapped[str] = mapped_column(String(32))
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float | None] = mapped_column(Float)

    attempt: Mapped[Attempt] = relationship(back_populates="pauses")


class HumanState(StrEnum):
    """Where a human attempt is: its container is up and the expert may connect in
    `waiting` (clock not started), `working` and `on_break`; `ended` once it is finished."""

    STARTING = "starting"
    WAITING = "waiting"
    WORKING = "working"
    ON_BREAK = "on_break"
    ENDING = "ending"
    ENDED = "ended"


class HumanSession(Base):
    """The live side of a human attempt (agent `human`): who the expert is, how they connect,
    which container holds their work and which harness process looks after it. It outlives
    the harness process, so `rebench human attach` can pick the attempt up again."""

    __tablename__ = "human_sessions"

    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), primary_key=True)
    expert: Mapped[str] = mapped_column(String(128), index=True)
    public_key: Mapped[str] = mapped_column(Text)
    key_fingerprint: Mapped[str] = mapped_column(String(128), default="")
    bind: Mapped[str] = mapped_column(String(64), default="127.0.0.1")
    port: Mapped[int | None] = mapped_column(Integer)
    gate_dir: Mapped[str | None] = mapped_column(Text)
    """Host folder mounted into the container: the SSH gate's and the harness's sockets, the recordings."""
    container_id: Mapped[str | None] = mapped_column(String(128))
    supervisor_pid: Mapped[int | None] = mapped_column(Integer)
    supervisor_host: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    clock_origin: Mapped[float | None] = mapped_column(Float)
    """Unix time at which the attempt clock's offsets (pauses' start_s/end_s, events' working_s) count from."""
    state: Mapped[HumanState] = mapped_column(EnumString(HumanState, 16), default=HumanState.STARTING)
    stop_requested: Mapped[str | None] = mapped_column(Text)
    """Set by `rebench human stop`: why; the supervisor ends the attempt at its next tick."""
    gpus: Mapped[list[Any] | None] = mapped_column(JSON)
    """Device ids given to `rebench human start --gpus`: leased by every supervisor of the attempt."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class PauseCorrection(Base):
    """A pause added after the fact (`rebench human adjust`): audited, never folded into `pauses`,
    so reports can show working time with and without corrections."""

    __tablename__ = "pause_corrections"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class GatewayRequest(Base):
    """One request through an attempt's model gateway (rebench.gateway), refused ones included:
    which meter paid (the agent's code, or the scorer), tokens, cost, latency and the HTTP status."""

    __tablename__ = "gateway_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    meter: Mapped[str] = mapped_column(String(16))  # agent | scorer | subject | unauthorized | agent_model
    model: Mapped[str] = mapped_column(String(128))
    endpoint: Mapped[str] = mapped_column(String(64))
    status: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class StoreSetting(Base):
    """A setting of the database itself (key `snapshots_dir`: its snapshot folder, relative to its own)."""

    __tablename__ = "store_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
