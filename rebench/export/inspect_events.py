"""One attempt's rows as Inspect events and messages, in the order they happened.

The events table, the score rows and the pauses are merged by time. Model calls become
`ModelEvent`s with the request rebuilt from its stored difference (rebench.models.requests),
the agent's tool calls `ToolEvent`s, the harness's own commands `SandboxEvent`s where the
agent's tool calls already show them (else `ToolEvent`s, so a scripted or aide attempt's
commands are in the transcript too), score rows `ScoreEvent`s with raw and normalized values,
pauses, notes and the rest `InfoEvent`s. Messages are shared between consecutive model
events, so memory (and Inspect's pooled log) grows with the conversation, not its square.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from inspect_ai._util.error import EvalError
from inspect_ai.event import (
    ErrorEvent,
    Event,
    InfoEvent,
    ModelEvent,
    SampleInitEvent,
    SampleLimitEvent,
    SandboxEvent,
    ScoreEvent,
    ToolEvent,
)
from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.scorer import Score
from inspect_ai.tool import ToolCall, ToolInfo
from pydantic import ValidationError

from rebench.export import Anchors, aware
from rebench.export.gateway_calls import BodyFiles, GatewayCalls
from rebench.models.requests import RequestReader
from rebench.store.events import ModelCall, SentMessage, SentTool, parse_event
from rebench.store.models import Attempt, Pause
from rebench.store.models import Event as EventRow
from rebench.store.models import ScoreEvent as ScoreRow

HARNESS_TOOLS = ("bash", "python", "read_file", "write_file")
LIMIT_TYPES = {"time": "working", "tokens": "token", "cost": "cost"}


def _tool_info(tool: SentTool) -> ToolInfo:
    try:
        return ToolInfo.model_validate({"name": tool.name, "description": tool.description,
                                        "parameters": tool.parameters})
    except ValidationError:  # a schema Inspect's ToolParams cannot hold: offered without parameters
        return ToolInfo(name=tool.name, description=tool.description)


def _calls(calls: Iterable[Any]) -> list[ToolCall]:
    return [ToolCall(id=c.id, function=c.name, arguments=c.arguments, parse_error=c.parse_error) for c in calls]


def _chat(message: SentMessage) -> ChatMessage:
    if message.role == "assistant":
        return ChatMessageAssistant(content=message.content, tool_calls=_calls(message.tool_calls) or None)
    if message.role == "tool":
        return ChatMessageTool(content=message.content, tool_call_id=message.tool_call_id,
                               function=message.tool_name)
    return ChatMessageUser(content=message.content)


def _exec_text(data: dict[str, Any]) -> str:
    if data.get("cancelled"):
        return "(cancelled by the hard timer)"
    parts = [f"exit code: {data.get('exit_code')}" + (" (timed out)" if data.get("timed_out") else "")]
    for stream in ("stdout", "stderr"):
        if data.get(stream):
            parts.append(f"{stream}:\n{data[stream]}")
    return "\n".join(parts)


@dataclass
class Transcript:
    """What one attempt becomes in an Inspect sample."""

    events: list[Event] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    output: ModelOutput | None = None
    submitted_answer: str | None = None
    instructions: str | None = None
    recordings: list[dict[str, Any]] = field(default_factory=list)
    """A human attempt's SSH sessions: where each recording is and how to replay it."""
    counts: dict[str, int] = field(default_factory=dict)
    """rebench event kinds (and `score_row`, `pause`) read, for checks against the store."""


class TranscriptBuilder:
    """Feeds an attempt's rows in time order into Inspect events."""

    def __init__(self, attempt: Attempt, anchors: Anchors | None, *, agent_tools: bool,
                 body_files: BodyFiles | None = None) -> None:
        self.attempt = attempt
        self.anchors = anchors
        self.agent_tools = agent_tools
        """The agent called tools itself (tool_result rows): the harness's commands are then its
        sandbox operations; otherwise they are the attempt's tool calls."""
        self.origin = aware(attempt.started_at or attempt.created_at)
        self.out = Transcript()
        self._requests = RequestReader()
        self._gateway_calls = GatewayCalls(body_files)
        """An installed agent's calls (through its gateway): their request and answer from the body files."""
        self._system: ChatMessage | None = None
        self._history: list[ChatMessage] = []
        self._history_source: list[SentMessage] = []
        self._last_score: ScoreEvent | None = None
        self._tool_number = 0

    # -- the merged stream -------------------------------------------------------------------
    def build(self, events: Iterable[EventRow], scores: list[ScoreRow], pauses: list[Pause]) -> Transcript:
        timed: list[tuple[datetime, int, Any]] = [(aware(s.created_at), 0, s) for s in scores]
        timed += [(self.origin + timedelta(seconds=p.start_s), 1, p) for p in pauses]
        timed.sort(key=lambda item: (item[0], item[1]))
        pending = iter(timed)
        upcoming = next(pending, None)
        for row in events:
            moment = aware(row.created_at)
            while upcoming is not None and upcoming[0] <= moment:
                self._side(upcoming[2])
                upcoming = next(pending, None)
            self._event(row)
        while upcoming is not None:
            self._side(upcoming[2])
            upcoming = next(pending, None)
        if self.out.output is None:
            self.out.output = ModelOutput.from_content(self.attempt.model or "none/none",
                                                       self.out.submitted_answer or "")
        if not self.out.messages:
            self.out.messages = [ChatMessageUser(content=self.out.instructions or "")]
        return self.out

    def _count(self, name: str) -> None:
        self.out.counts[name] = self.out.counts.get(name, 0) + 1

    def _side(self, row: ScoreRow | Pause) -> None:
        if isinstance(row, Pause):
            self._count("pause")
            length = None if row.end_s is None else round(row.end_s - row.start_s, 3)
            self.out.events.append(InfoEvent(
                timestamp=self.origin + timedelta(seconds=row.start_s), source="pause",
                data={"reason": row.reason, "start_s": row.start_s, "end_s": row.end_s, "length_s": length}))
            return
        self._count("score_row")
        normalized = self.anchors.normalized(row.raw) if self.anchors is not None and row.valid else None
        score = Score(value={"raw": row.raw, "normalized": normalized},
                      answer=f"{row.kind} score" + ("" if row.valid else " (invalid)"),
                      explanation=json.dumps(row.message, default=str) if row.message else None,
                      metadata={"kind": str(row.kind), "valid": row.valid, "working_s": row.working_s,
                                "duration_s": row.duration_s})
        event = ScoreEvent(timestamp=aware(row.created_at), working_start=row.working_s, score=score,
                           intermediate=True, scorer=f"rebench/{row.kind}")
        self._last_score = event if row.kind == "intermediate" else None
        self.out.events.append(event)

    # -- one event row ------------------------------------------------------------------------
    def _event(self, row: EventRow) -> None:
        kind = str(row.kind)
        self._count(kind)
        payload = parse_event(kind, row.data)
        data = payload.model_dump(mode="json", exclude={"kind", "v"})
        common: dict[str, Any] = {"timestamp": aware(row.created_at), "working_start": row.working_s}
        if kind == "start":
            self.out.instructions = data["instructions"]
            from inspect_ai.dataset import Sample

            self.out.events.append(SampleInitEvent(**common, sample=Sample(
                input=data["instructions"], id=self.attempt.id, metadata={k: v for k, v in data.items()
                                                                          if k != "instructions"}), state={}))
        elif kind == "model_call":
            self._model_call(payload, row, common)
        elif kind == "tool_result":
            self.out.events.append(ToolEvent(**common, id=data["call_id"], function=data["tool"],
                                             arguments=data["arguments"], result=data["output"]))
            self.out.messages.append(ChatMessageTool(content=data["output"], tool_call_id=data["call_id"],
                                                     function=data["tool"]))
        elif kind in HARNESS_TOOLS:
            self.out.events.append(self._harness_tool(kind, data, common, row.duration_s))
        elif kind == "score":
            if self._last_score is not None and self._last_score.score.metadata is not None:
                self._last_score.score.metadata["shown_to_agent"] = data["feedback"]
                self._last_score = None
        elif kind == "submit":
            self.out.submitted_answer = data.get("answer")
            self.out.events.append(InfoEvent(**common, source="submit", data=data))
        elif kind == "limit":
            self.out.events.append(SampleLimitEvent(**common, type=LIMIT_TYPES.get(data["which"], "custom"),
                                                    message=f"{data['which']} limit: {data['detail']}"))
        elif kind == "agent_error":
            self.out.events.append(ErrorEvent(**common, error=EvalError(
                message=f"{data['error_source']}: {data['error']}", traceback="", traceback_ansi="")))
        elif kind == "task":
            self.out.events.append(ToolEvent(**common, id=f"task-{row.seq}", function="task",
                                             arguments={"command": data["command"], "args": data["args"]},
                                             result=data["output"]))
        elif kind == "ssh_session":
            data["replay"] = f"rebench human replay {self.attempt.id} --session {data['session']}"
            self.out.recordings.append({k: data.get(k) for k in ("session", "mode", "recording", "replay")})
            self.out.events.append(InfoEvent(**common, source="ssh_session", data=data))
        else:
            self.out.events.append(InfoEvent(**common, source=kind, data=data))

    def _harness_tool(self, kind: str, data: dict[str, Any], common: dict[str, Any], duration_s: float) -> Event:
        if self.agent_tools:
            if kind in ("bash", "python"):
                command = data["command"] if kind == "bash" else "python -"
                return SandboxEvent(**common, action="exec", cmd=command, input=data.get("code"),
                                    result=data.get("exit_code"), output=_exec_text(data),
                                    options={"timeout": data.get("timeout")})
            if kind == "read_file":
                return SandboxEvent(**common, action="read_file", file=data["path"], output=f"{data['bytes']} bytes")
            return SandboxEvent(**common, action="write_file", file=data["path"], input=data["content"])
        self._tool_number += 1
        arguments = {k: v for k, v in data.items() if k in ("command", "code", "path", "content", "timeout")}
        if kind in ("bash", "python"):
            result = _exec_text(data)
        else:
            result = f"{data['bytes']} bytes {'read' if kind == 'read_file' else 'written'}"
        return ToolEvent(**common, id=f"harness-{self._tool_number}", function=kind, arguments=arguments,
                         result=result, working_time=duration_s)

    def _model_call(self, payload: Any, row: EventRow, common: dict[str, Any]) -> None:
        """A ModelEvent: the rebuilt request (none for rows from before requests were stored), the reply."""
        model = payload.model
        reply = ChatMessageAssistant(content=payload.text, model=model,
                                     tool_calls=_calls(map(_reply_call, payload.tool_calls)) or None)
        stop = payload.extra.get("stop_reason")
        reason = "tool_calls" if payload.tool_calls else ("max_tokens" if stop in ("length", "max_tokens")
                                                           else "stop")
        usage = ModelUsage(input_tokens=payload.input_tokens, output_tokens=payload.output_tokens,
                           total_tokens=payload.input_tokens + payload.output_tokens,
                           input_tokens_cache_read=payload.cached_tokens or None, total_cost=payload.cost_usd)
        output = ModelOutput(model=model, choices=[ChatCompletionChoice(message=reply, stop_reason=reason)],
                             usage=usage, time=payload.wait_s)
        inputs: list[ChatMessage] = []
        tools: list[ToolInfo] = []
        config = GenerateConfig()
        metadata: dict[str, Any] = {"turn": payload.turn, **payload.extra}
        request = payload.request if isinstance(payload, ModelCall) else None
        if request is not None:
            full = self._requests.read(request)
            inputs = self._conversation(full.system, full.messages)
            tools = [_tool_info(t) for t in full.tools]
            config = GenerateConfig(max_tokens=full.max_output_tokens)
        elif payload.extra.get("via") == "gateway" and "body_file" in payload.extra:
            rebuilt = self._gateway_calls.rebuild(payload.extra, model)
            inputs, tools, config = rebuilt.input, rebuilt.tools, rebuilt.config
            if rebuilt.output is not None:  # the metered tokens, cost and wait, as for every other call
                output = rebuilt.output.model_copy(update={"usage": usage, "time": payload.wait_s})
                reply = output.message
            metadata["request"] = "; ".join(rebuilt.notes) or "rebuilt from the gateway's body file"
        else:
            metadata = {"turn": payload.turn, "request": "not stored (recorded before rebench stored requests)"}
        started = max(0.0, row.working_s - payload.wait_s)
        self.out.events.append(ModelEvent(
            timestamp=common["timestamp"] - timedelta(seconds=payload.wait_s), working_start=started,
            completed=common["timestamp"], working_time=payload.wait_s, model=model, input=inputs, tools=tools,
            tool_choice="auto", config=config, output=output, metadata=metadata))
        self.out.output = output
        self.out.messages = [*inputs, reply]

    def _conversation(self, system: str, messages: list[SentMessage]) -> list[ChatMessage]:
        """The request as Inspect messages, reusing the previous call's message objects where equal."""
        if self._system is None or self._system.content != system:
            self._system = ChatMessageSystem(content=system)
        history: list[ChatMessage] = []
        for index, message in enumerate(messages):
            same = index < len(self._history_source) and self._history_source[index] == message
            history.append(self._history[index] if same else _chat(message))
        self._history, self._history_source = history, list(messages)
        return [self._system, *history] if system else list(history)


@dataclass(frozen=True)
class _Call:
    """A reply's tool call as stored in a model_call row."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    parse_error: str | None = None


def _reply_call(stored: dict[str, Any]) -> _Call:
    """A stored tool call; a gateway row keeps the API's own form (arguments as a JSON string, or none)."""
    arguments, error = stored.get("arguments"), stored.get("parse_error")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            arguments, error = {"raw": arguments}, error or "arguments are not JSON"
    if not isinstance(arguments, dict):
        arguments = {} if arguments is None else {"value": arguments}
    return _Call(id=str(stored.get("id") or ""), name=str(stored.get("name") or ""), arguments=arguments,
                 parse_error=error)

