"""One attempt's rows as ATIF steps, in the order they happened (rebench.export.atif writes them).

The events table and the score rows are merged by time. The `start` event is the user step with the
task; each model call an agent step (its text, reasoning where the answer holds it, tool calls,
tokens and cost), preceded by the system prompt and user messages its request sent for the first
time; each tool result the observation of the step whose call it answers. Where the agent had no
tool calls of its own (replay, reference, aide, humans), the harness's commands, score and submit
calls and a human's `task` commands are agent steps of their own (`llm_call_count` 0). Score rows of
other kinds, limits, errors, notes, aide's nodes, SSH sessions and the rest are system steps.

Steps wait in a short queue until each of their tool calls has its result (a gateway agent's results
come with its next request), then are numbered and handed on: memory holds a few steps, never the
attempt. Text is the agent's as stored; only JSON escapes it.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from rebench.export import Anchors, aware
from rebench.export.atif_gateway import GatewayTurns
from rebench.store.events import ModelCall, parse_event
from rebench.store.models import Attempt
from rebench.store.models import Event as EventRow
from rebench.store.models import ScoreEvent as ScoreRow

Step = dict[str, Any]
HARNESS_TOOLS = ("bash", "python", "read_file", "write_file")
HOLD = 32
"""Steps kept back at most while the first of them waits for a tool result."""
HELDOUT_FACTS = ("solution", "call", "fallback")
"""What a held-out score row's details may show; the scorer's message, its split's params and the
snapshot folder stay out (they can name the held-out data)."""


class StepQueue:
    """Numbers steps and hands them to `write` once their tool calls are answered (or HOLD steps wait)."""

    def __init__(self, write: Callable[[Step], None]) -> None:
        self.write = write
        self.queue: deque[Step] = deque()
        self.written = 0

    def add(self, step: Step) -> Step:
        self.queue.append(step)
        self._drain()
        return step

    def last(self, source: str | None = None) -> Step | None:
        return next((s for s in reversed(self.queue) if source is None or s["source"] == source), None)

    def observe(self, call_id: str, content: str, extra: dict[str, Any] | None = None) -> bool:
        """Attach a tool result to the waiting step that made the call; False when none did."""
        for step in reversed(self.queue):
            if call_id in {c["tool_call_id"] for c in step.get("tool_calls") or []}:
                result: dict[str, Any] = {"source_call_id": call_id, "content": content}
                if extra:
                    result["extra"] = extra
                step.setdefault("observation", {"results": []})["results"].append(result)
                self._drain()
                return True
        return False

    def insert_before(self, anchor: Step, step: Step) -> bool:
        """Put `step` just before a step still waiting here (False: `anchor` was handed on already)."""
        for index, queued in enumerate(self.queue):
            if queued is anchor:
                self.queue.insert(index, step)
                return True
        return False

    def release(self) -> None:
        """Steps held for what the next row might add (the task, a `task` command's merge) go on."""
        for step in self.queue:
            step.pop("_hold", None)
            step.pop("_merge", None)
        self._drain()

    @staticmethod
    def _waiting(step: Step) -> bool:
        if "_hold" in step or "_merge" in step:
            return True
        answered = {r.get("source_call_id") for r in (step.get("observation") or {}).get("results", [])}
        return any(c["tool_call_id"] not in answered for c in step.get("tool_calls") or [])

    def _drain(self, everything: bool = False) -> None:
        while self.queue and (everything or len(self.queue) > HOLD or not self._waiting(self.queue[0])):
            step = self.queue.popleft()
            self.written += 1
            self.write({"step_id": self.written, **{k: v for k, v in step.items() if not k.startswith("_")}})

    def close(self) -> None:
        self._drain(everything=True)


def _exec_text(data: dict[str, Any]) -> str:
    if data.get("cancelled"):
        return "(cancelled by the hard timer)"
    parts = [f"exit code: {data.get('exit_code')}" + (" (timed out)" if data.get("timed_out") else "")]
    parts += [f"{stream}:\n{data[stream]}" for stream in ("stdout", "stderr") if data.get(stream)]
    return "\n".join(parts)


def _arguments(stored: Any) -> dict[str, Any]:
    """A stored tool call's arguments as an object (a gateway row keeps the API's JSON string)."""
    if isinstance(stored, str):
        try:
            stored = json.loads(stored) if stored.strip() else {}
        except ValueError:
            return {"unparsed arguments": stored}
    if isinstance(stored, dict):
        return stored
    return {} if stored is None else {"value": stored}


class AtifSteps:
    """Feeds an attempt's rows in time order into a StepQueue; keeps the small facts the root holds."""

    def __init__(self, attempt: Attempt, anchors: Anchors | None, heldout: Anchors | None, queue: StepQueue, *,
                 agent_tools: bool, gateway: GatewayTurns) -> None:
        self.attempt = attempt
        self.anchors, self.heldout = anchors, heldout
        self.queue = queue
        self.agent_tools = agent_tools
        """The agent called tools itself (tool_result rows): the harness's commands are how they ran."""
        self.gateway = gateway
        self.tools: dict[str, dict[str, Any]] = {}
        """Tool definitions offered, by name (first seen)."""
        self.scores: list[dict[str, Any]] = []
        self.aide_tree: list[dict[str, Any]] = []
        self.recordings: dict[int, dict[str, Any]] = {}
        self.counts: Counter[str] = Counter()
        self.notes: list[str] = []
        self.instructions: str | None = None
        self._start: Step | None = None
        self._systems: set[str] = set()
        self._pending_scores: list[dict[str, Any]] = []
        self._replied = False

    def build(self, events: Iterable[EventRow], scores: list[ScoreRow]) -> None:
        pending = iter(sorted(scores, key=lambda s: aware(s.created_at)))
        upcoming = next(pending, None)
        for row in events:
            while upcoming is not None and aware(upcoming.created_at) <= aware(row.created_at):
                self._score_row(upcoming)
                upcoming = next(pending, None)
            self._event(row)
        while upcoming is not None:
            self._score_row(upcoming)
            upcoming = next(pending, None)
        for facts in self._pending_scores:  # score rows no score call showed (an interrupted call)
            self._system(f"{facts['kind']} score: raw {facts['raw']}", facts["at"], {"score": facts})
        self.queue.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _step(self, source: str, message: str, at: datetime, extra: dict[str, Any], **fields: Any) -> Step:
        """A step; `fields` named `_...` (held for the next row) are not written."""
        step: Step = {"timestamp": aware(at).isoformat(), "source": source, "message": message,
                      **{k: v for k, v in fields.items() if not k.startswith("_")}, "extra": extra}
        step.update({k: v for k, v in fields.items() if k.startswith("_")})
        return self.queue.add(step)

    def _system(self, message: str, at: Any, extra: dict[str, Any]) -> Step:
        return self._step("system", message, at, extra)

    def _dispatch(self, at: datetime, extra: dict[str, Any], call_id: str, function: str, arguments: dict[str, Any],
                  result: str, merge: str | None = None) -> Step:
        """An action the harness ran for an agent without tool calls of its own: no model call behind it."""
        held = {"_merge": merge} if merge else {}
        return self._step("agent", "", at, extra, tool_calls=[
            {"tool_call_id": call_id, "function_name": function, "arguments": arguments}],
            observation={"results": [{"source_call_id": call_id, "content": result}]}, llm_call_count=0, **held)

    def _extra(self, row: EventRow) -> dict[str, Any]:
        return {"event": str(row.kind), "seq": row.seq, "working_s": row.working_s}

    # -- score rows ------------------------------------------------------------------------------
    def _score_row(self, row: ScoreRow) -> None:
        self.queue.release()
        self.counts["score_row"] += 1
        anchors = self.heldout if row.kind == "heldout" else self.anchors
        facts: dict[str, Any] = {
            "kind": str(row.kind), "raw": row.raw, "valid": row.valid,
            "normalized": anchors.normalized(row.raw) if anchors is not None and row.valid else None,
            "working_s": row.working_s, "duration_s": row.duration_s, "at": aware(row.created_at).isoformat()}
        if row.kind == "heldout":
            facts.update({k: row.details.get(k) for k in HELDOUT_FACTS if row.details.get(k) is not None})
        self.scores.append(facts)
        if row.kind == "intermediate":
            self._pending_scores.append(facts)
        else:
            self._system(f"{row.kind} score: raw {row.raw}" + ("" if row.valid else " (invalid)"), row.created_at,
                         {"score": facts})

    # -- event rows ------------------------------------------------------------------------------
    def _event(self, row: EventRow) -> None:
        kind = str(row.kind)
        self.counts[kind] += 1
        payload = parse_event(kind, row.data)
        data = payload.model_dump(mode="json", exclude={"kind", "v"})
        extra = self._extra(row)
        if kind not in ("model_call", "task"):
            self.queue.release()
        if kind == "start":  # held: the agent's first request may send the task with more (it is then that)
            self.instructions = data["instructions"]
            self._start = self._step("user", data["instructions"], row.created_at, extra, _hold=True)
        elif kind == "model_call":
            self._model_call(payload, row, extra)
        elif kind == "tool_result":
            if not self.queue.observe(data["call_id"], data["output"], {"tool": data["tool"], **extra}):
                self._system(f"result of tool call {data['call_id']!r} ({data['tool']})", row.created_at,
                             {**extra, "tool": data["tool"], "call_id": data["call_id"], "output": data["output"]})
        elif kind in HARNESS_TOOLS:
            self._harness_tool(kind, data, row, extra)
        elif kind == "score":
            self._score_call(data, row, extra)
        elif kind == "submit":
            if self.agent_tools:
                self._on_last_agent("submitted", data.get("answer"), row, extra)
            else:
                self._dispatch(row.created_at, extra, f"submit-{row.seq}", "submit",
                               {} if data.get("answer") is None else {"answer": data["answer"]}, "submitted",
                               merge="submit")
        elif kind == "task":
            self._task(data, row, extra)
        elif kind == "aide_node":
            self.aide_tree.append({k: data[k] for k in ("node", "parent", "step", "metric", "buggy", "score")})
            self._system(f"aide node {data['node']} ({data['step']}"
                         + (f" of node {data['parent']})" if data["parent"] is not None else ")"),
                         row.created_at, {**extra, "aide_node": data})
        elif kind == "note" and "by" in data["data"] and data["data"]["by"] != "operator":
            pass  # a `task note`: its `task` event is the step
        else:
            self._other(kind, data, row, extra)

    def _other(self, kind: str, data: dict[str, Any], row: EventRow, extra: dict[str, Any]) -> None:
        if kind == "ssh_session":
            data["replay"] = f"rebench human replay {self.attempt.id} --session {data['session']}"
            self.recordings[data["session"]] = {k: data.get(k) for k in ("session", "mode", "recording", "replay")}
            message = f"SSH session {data['session']} ({data['mode']}) " + ("ended" if data["ended"] else "opened")
        elif kind == "note":
            message = data["message"]
        elif kind == "limit":
            message = f"{data['which']} limit: {data['detail']}"
        elif kind == "agent_error":
            message = f"{data['error_source']} error: {data['error']}"
        elif kind == "snapshot":
            data.pop("path", None)  # the host's snapshot folder
            message = "snapshot" + (f": {data['note']}" if data.get("note") else "")
        else:
            message = kind
        self._system(message, row.created_at, {**extra, kind: data})

    def _on_last_agent(self, key: str, value: Any, row: EventRow, extra: dict[str, Any]) -> None:
        step = self.queue.last("agent")
        if step is None:
            self._system(key, row.created_at, {**extra, key: [value]})
        else:
            step["extra"].setdefault(key, []).append(value)

    def _harness_tool(self, kind: str, data: dict[str, Any], row: EventRow, extra: dict[str, Any]) -> None:
        arguments = {k: v for k, v in data.items() if k in ("command", "code", "path", "content", "timeout")}
        if kind in ("bash", "python"):
            result = _exec_text(data)
        else:
            result = f"{data['bytes']} bytes {'read' if kind == 'read_file' else 'written'}"
        if self.agent_tools:  # how the agent's own tool call ran; its output is the call's observation
            ran = {"kind": kind, **{k: v for k, v in arguments.items() if k != "content"},
                   "exit_code": data.get("exit_code"), "duration_s": row.duration_s}
            self._on_last_agent("sandbox", ran, row, extra)
            return
        self._dispatch(row.created_at, {**extra, "duration_s": row.duration_s}, f"harness-{row.seq}", kind, arguments,
                       result)

    def _score_call(self, data: dict[str, Any], row: EventRow, extra: dict[str, Any]) -> None:
        rows, self._pending_scores = self._pending_scores, []
        if self.agent_tools:
            self._on_last_agent("score_calls", {"shown_to_agent": data["feedback"], "rows": rows}, row, extra)
            return
        self._dispatch(row.created_at, {**extra, "scores": rows}, f"score-{row.seq}", "score", {},
                       json.dumps(data["feedback"], ensure_ascii=False), merge="score")

    def _task(self, data: dict[str, Any], row: EventRow, extra: dict[str, Any]) -> None:
        call_id = f"task-{row.seq}"
        arguments = {"command": data["command"], "args": data["args"]}
        call: dict[str, Any] = {"tool_call_id": call_id, "function_name": "task", "arguments": arguments}
        extra = {**extra, "exit_code": data["exit_code"]}
        last = self.queue.last()
        if last is not None and last.get("_merge") == data["command"]:  # the score/submit call this command made
            last.pop("_merge")
            last["tool_calls"] = [call]
            last["observation"] = {"results": [{"source_call_id": call_id, "content": data["output"]}]}
            last["extra"] = {**last["extra"], "task": extra}
            self.queue.release()
            return
        self.queue.release()
        self._dispatch(row.created_at, extra, call_id, "task", arguments, data["output"])

    # -- model calls -----------------------------------------------------------------------------
    def _said(self, source: str, text: str, at: datetime, row: EventRow, turn: int | None) -> None:
        """A system prompt or user message a model call sent for the first time."""
        extra = {**self._extra(row), "sent_with_call": turn}
        start = self._start
        if source == "system":
            if text in self._systems:
                return
            self._systems.add(text)
            step: Step = {"timestamp": aware(at).isoformat(), "source": "system", "message": text, "extra": extra}
            if start is not None and self.queue.insert_before(start, step):
                return
            self.queue.add(step)
            return
        if not self._replied and self.instructions is not None and text.startswith(self.instructions):
            if text == self.instructions:
                return  # the task, already the `start` step
            if start is not None and "_hold" in start:  # the task as the agent sent it
                start["message"] = text
                start["extra"] = {**start["extra"], "sent_with_call": turn, "task_chars": len(self.instructions)}
                return
        self._step(source, text, at, extra)

    def _model_call(self, payload: Any, row: EventRow, extra: dict[str, Any]) -> None:
        at = row.created_at
        extra = {**extra, "turn": payload.turn, "wait_s": payload.wait_s,
                 **{k: v for k, v in payload.extra.items() if k != "body_file"}}
        text, reasoning = payload.text, None
        request = payload.request if isinstance(payload, ModelCall) else None
        if request is not None:
            if request.system is not None:
                self._said("system", request.system, at, row, payload.turn)
            for tool in request.tools or []:
                self.tools.setdefault(tool.name, {"type": "function", "function": tool.model_dump(mode="json")})
            sent = list(request.messages)
            last_reply = max((i for i, m in enumerate(sent) if m.role == "assistant"), default=-1)
            for message in sent[last_reply + 1:]:
                if message.role == "user":
                    self._said("user", message.content, at, row, payload.turn)
        elif payload.extra.get("via") == "gateway" and "body_file" in payload.extra:
            turn = self.gateway.read(payload.extra, payload.model)
            if turn.system:
                self._said("system", turn.system, at, row, payload.turn)
            for offered in turn.tools:
                self.tools.setdefault(offered["function"]["name"], offered)
            for call_id, content in turn.results:
                if not self.queue.observe(call_id, content):
                    self._system(f"result of tool call {call_id!r}", at, {**extra, "call_id": call_id,
                                                                           "output": content})
            for said in turn.users:
                self._said("user", said, at, row, payload.turn)
            if turn.text is not None and len(turn.text) > len(text):  # the event keeps 20,000 characters
                text = turn.text
            reasoning = turn.reasoning
            if turn.notes:
                extra["request"] = "; ".join(turn.notes)
        else:
            extra["request"] = "not stored (recorded before rebench stored requests)"
        calls = [{"tool_call_id": str(c.get("id") or f"call-{row.seq}-{i}"), "function_name": str(c.get("name") or ""),
                  "arguments": _arguments(c.get("arguments"))} for i, c in enumerate(payload.tool_calls, start=1)]
        fields: dict[str, Any] = {"llm_call_count": 1, "metrics": {
            "prompt_tokens": payload.input_tokens, "completion_tokens": payload.output_tokens,
            "cached_tokens": payload.cached_tokens, "cost_usd": payload.cost_usd}}
        if payload.model != self.attempt.model:
            fields["model_name"] = payload.model
        if reasoning:
            fields["reasoning_content"] = reasoning
        if calls:
            fields["tool_calls"] = calls
        self._replied = True
        self.queue.release()
        self._step("agent", text, at, extra, **fields)
