"""The event log's schema: one versioned pydantic model per event kind.

The `events` table is the audit and replay contract of an attempt, so what goes
into its `data` column is typed here rather than being whatever keyword
arguments a caller passed. `validate_event` runs on every write (an unknown
kind, a missing field or an unexpected one raises), `parse_event` on read.

Each payload carries `v`, its schema version, in the stored JSON. Changing a
payload's fields means a new model with the next `v` (and keeping the old one
for reading old rows), never an edit in place. Rows written before versions
existed have no `v`: they are version 1.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rebench.errors import RebenchError
from rebench.store.models import ErrorSource, EventKind, LimitReason

__all__ = ["EventKind", "EventPayload", "EventSchemaError", "parse_event", "validate_event"]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1


class Start(_Payload):
    kind: Literal["start"] = "start"
    instructions: str
    agent: str
    model: str | None
    budget_s: float
    backend: str


class _Exec(_Payload):
    """A command; a cancelled one (the hard timer) has no result fields."""

    timeout: float | None
    exit_code: int | None = None
    timed_out: bool | None = None
    stdout: str | None = None
    stderr: str | None = None
    cancelled: bool = False


class Bash(_Exec):
    kind: Literal["bash"] = "bash"
    command: str


class Python(_Exec):
    kind: Literal["python"] = "python"
    code: str


class ReadFile(_Payload):
    kind: Literal["read_file"] = "read_file"
    path: str
    bytes: int


class WriteFile(_Payload):
    kind: Literal["write_file"] = "write_file"
    path: str
    bytes: int
    content: str


class UploadDir(_Payload):
    kind: Literal["upload_dir"] = "upload_dir"
    source: str
    dest: str


class Score(_Payload):
    kind: Literal["score"] = "score"
    feedback: dict[str, Any]


class ScoreLog(_Payload):
    kind: Literal["score_log"] = "score_log"
    entries: int


class Submit(_Payload):
    kind: Literal["submit"] = "submit"
    answer: str | None


class Sleep(_Payload):
    kind: Literal["sleep"] = "sleep"
    seconds: float


class SentToolCall(BaseModel):
    """A tool call inside a message sent to the model (rebench.models.ToolCall)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = None


class SentMessage(BaseModel):
    """One message as the agent sent it (rebench.models.Message); defaults are left out when stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[SentToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None


class SentTool(BaseModel):
    """A tool offered to the model (rebench.models.ToolSpec)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class ReplacedMessage(BaseModel):
    """A message of the kept prefix that changed since the previous call (e.g. trimmed to a notice)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)
    message: SentMessage


class ModelRequest(BaseModel):
    """What one model call sent, stored as a difference from the call before it.

    Consecutive calls of a conversation resend everything said so far, so storing each
    request whole would grow quadratically with the attempt. A request instead names the
    call it `extends`, keeps that request's first `keep` messages (with `replaced` ones
    swapped in), and adds `messages`; `system` and `tools` are None when unchanged.
    rebench.models.requests rebuilds full requests from a sequence of these.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    call: int = Field(ge=1)
    """This call's number among the agent's recorded model calls, from 1."""
    extends: int | None = None
    keep: int = Field(default=0, ge=0)
    replaced: list[ReplacedMessage] = Field(default_factory=list)
    system: str | None = None
    tools: list[SentTool] | None = None
    messages: list[SentMessage] = Field(default_factory=list)
    max_output_tokens: int


class _ModelCallFields(BaseModel):
    """ModelUsage's fields, what the model said, and the agent's turn number."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["model_call"] = "model_call"
    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float
    wait_s: float
    extra: dict[str, Any] = Field(default_factory=dict)
    text: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    turn: int | None = None


class ModelCallV1(_ModelCallFields):
    """A model call before requests were stored: the reply only."""

    v: Literal[1] = 1


class ModelCall(_ModelCallFields):
    """A model call with what was sent (`request`; None where the caller sent none, e.g. a gateway row)."""

    v: Literal[2] = 2
    request: ModelRequest | None = None


class Limit(_Payload):
    kind: Literal["limit"] = "limit"
    which: LimitReason
    detail: str


class AgentError(_Payload):
    kind: Literal["agent_error"] = "agent_error"
    error: str
    error_source: ErrorSource


class LeftOutEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    reason: str
    size: int | None = None


class Snapshot(_Payload):
    """The snapshot's report (rebench.sandbox.snapshot.SnapshotReport), or only a note when it failed."""

    kind: Literal["snapshot"] = "snapshot"
    path: str | None = None
    note: str | None = None
    files: int | None = None
    bytes: int | None = None
    cap_bytes: int | None = None
    cap_files: int | None = None
    read_bytes: int | None = None
    capped: bool | None = None
    stopped_at: str | None = None
    after_stop: int | None = None
    left_out: list[LeftOutEntry] | None = None
    left_out_count: int | None = None
    score_id: int | None = None
    """Set on a snapshot taken at a score call (rescore_best, or best with a held-out split): that call's
    score event."""
    sha256: str | None = None


class ModelError(_Payload):
    kind: Literal["model-error"] = "model-error"
    model: str
    error: str
    status: int | None
    retries: int
    context_overflow: bool


class ProviderRetry(_Payload):
    kind: Literal["provider-retry"] = "provider-retry"
    model: str
    status: int | None
    error: str
    retry: int
    delay_s: float


class BudgetSpent(_Payload):
    kind: Literal["budget_spent"] = "budget_spent"
    turn: int


class AgentGaveUp(_Payload):
    kind: Literal["agent_gave_up"] = "agent_gave_up"
    reason: str


class ToolResult(_Payload):
    kind: Literal["tool_result"] = "tool_result"
    turn: int
    tool: str
    call_id: str
    arguments: dict[str, Any]
    output: str


class ContextTrimmed(_Payload):
    kind: Literal["context_trimmed"] = "context_trimmed"
    turn: int
    messages: int
    budget_tokens: int


class ContextTargetReduced(_Payload):
    kind: Literal["context_target_reduced"] = "context_target_reduced"
    turn: int
    context_fill: float


class AideNode(_Payload):
    """One node of the aide agent's tree: where it hangs, how it was made, how it ran and scored."""

    kind: Literal["aide_node"] = "aide_node"
    node: int
    parent: int | None
    step: Literal["draft", "debug", "improve"]
    plan: str
    diff: str
    files: list[str]
    run_command: str | None = None
    exit_code: int | None = None
    timed_out: bool = False
    output_tail: str = ""
    score: float | None = None
    """The environment's raw score where it is shown (None: hidden, invalid or not scored)."""
    score_valid: bool | None = None
    metric: float | None = None
    """What ranked the node: the score, or the agent's own validation metric."""
    buggy: bool
    summary: str = ""


class Note(_Payload):
    kind: Literal["note"] = "note"
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class Task(_Payload):
    """A `task` command run by the expert inside a human attempt's sandbox, and its answer."""

    kind: Literal["task"] = "task"
    command: str
    args: list[str] = Field(default_factory=list)
    exit_code: int = 0
    output: str = ""


class SshSession(_Payload):
    """One SSH session of a human attempt (`mode`: pty, exec or sftp) and its recording."""

    kind: Literal["ssh_session"] = "ssh_session"
    session: int
    mode: str
    command: str | None = None
    recording: str | None = None
    ended: bool = False
    bytes_in: int | None = None
    bytes_out: int | None = None


_LATEST: tuple[type[BaseModel], ...] = (
    Start, Bash, Python, ReadFile, WriteFile, UploadDir, Score, ScoreLog, Submit, Sleep, ModelCall, Limit, AgentError,
    Snapshot, ModelError, ProviderRetry, BudgetSpent, AgentGaveUp, ToolResult, ContextTrimmed, ContextTargetReduced,
    AideNode, Note, Task, SshSession,
)
_OLDER: tuple[type[BaseModel], ...] = (ModelCallV1,)
"""Earlier versions of a kind's payload, kept so that old rows still read."""

EventPayload = (
    Start | Bash | Python | ReadFile | WriteFile | UploadDir | Score | ScoreLog | Submit | Sleep | ModelCallV1
    | ModelCall | Limit | AgentError | Snapshot | ModelError | ProviderRetry | BudgetSpent | AgentGaveUp | ToolResult
    | ContextTrimmed | ContextTargetReduced | AideNode | Note | Task | SshSession
)
PAYLOAD_MODELS: dict[str, type[BaseModel]] = {model.model_fields["kind"].default: model for model in _LATEST}
"""Each kind's current payload model: what a write is checked against."""
PAYLOAD_VERSIONS: dict[str, dict[int, type[BaseModel]]] = {}
for _model in (*_OLDER, *_LATEST):
    PAYLOAD_VERSIONS.setdefault(_model.model_fields["kind"].default, {})[_model.model_fields["v"].default] = _model
if set(PAYLOAD_MODELS) != {k.value for k in EventKind}:  # pragma: no cover - a schema edit left one side behind
    raise RuntimeError(f"event kinds and payload models differ: {set(PAYLOAD_MODELS) ^ {k.value for k in EventKind}}")


class EventSchemaError(RebenchError):
    """An event that does not match its kind's schema; raised before anything is written."""


def _check(kind: str, data: dict[str, Any], action: str) -> EventPayload:
    if kind not in PAYLOAD_MODELS:
        raise EventSchemaError(f"unknown event kind {kind!r} ({action}); allowed: {', '.join(PAYLOAD_MODELS)}")
    # a write takes the current model; a read the row's own version (none stored: 1), and a
    # version nobody wrote fails on the current model's `v`
    model = PAYLOAD_MODELS[kind]
    version = data.get("v", 1)
    if action == "read" and isinstance(version, int):
        model = PAYLOAD_VERSIONS[kind].get(version, model)
    try:
        return model.model_validate({**data, "kind": kind})  # type: ignore[return-value]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise EventSchemaError(f"event {kind!r} ({action}): {where}: {first['msg']}") from None


def validate_event(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """The JSON to store for one event: checked against its kind's model, with its version `v`.

    Only the fields the caller gave (and `v`) are stored, so the recorded shape is what
    was written; a field the model does not know, or a required one left out, raises.
    """
    if "v" in data:
        raise EventSchemaError(f"event {kind!r} (write): 'v' is set by the schema, not the caller")
    payload = _check(kind, data, "write")
    return {"v": payload.v, **payload.model_dump(mode="json", exclude_unset=True, exclude={"kind"})}


def parse_event(kind: str, data: dict[str, Any]) -> EventPayload:
    """A stored event's payload as its typed model (rows without `v` are version 1)."""
    return _check(kind, data, "read")
