"""What each model call sent is stored beside its reply, as a difference from the call before.

The modular agent runs against the fake model server through the real SDKs (ScratchContext:
real local sandbox, real recorder, real SQLite); each stored request is rebuilt with
RequestReader and translated with the provider's own wire translation, and must equal what the
server received, trimmed messages included. The storage must grow with the new messages only.
"""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebench.agents.modular.history import TRIMMED_NOTICE
from rebench.models import Message, ToolSpec
from rebench.models.openai_provider import to_openai_messages, to_openai_tools
from rebench.models.requests import RequestChainError, RequestLog, RequestReader
from rebench.store.events import ModelCall, ModelCallV1, ModelRequest, parse_event, validate_event
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_server, prices_file, provider_keys  # noqa: F401
from tests.test_modular_agent import run_agent


def test_every_stored_request_rebuilds_to_what_the_server_received(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        *[{"tool_calls": [call("python", code=f"print('{n}' * 3000)")]} for n in range(1, 7)],
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path, context_window="4000",
                    max_output_tokens="500", output_limit_chars="4000")
    calls = [data for kind, data in ctx.events if kind == "model_call"]
    assert len(calls) == len(model_server.requests) == 7 and "context_trimmed" in ctx.kinds()
    reader = RequestReader()
    for data, wire in zip(calls, model_server.requests, strict=True):
        payload = parse_event("model_call", data)
        assert isinstance(payload, ModelCall) and payload.request is not None
        full = reader.read(payload.request)
        messages = [Message.model_validate(m.model_dump()) for m in full.messages]
        assert to_openai_messages(full.system, messages) == wire.body["messages"]
        tools = [ToolSpec.model_validate(t.model_dump()) for t in full.tools]
        assert to_openai_tools(tools) == wire.body["tools"]
        assert full.max_output_tokens == 500
    requests = [c["request"] for c in calls]
    assert all("system" not in r and "tools" not in r for r in requests[1:]), "unchanged parts are not stored again"
    assert any(r.get("replaced") for r in requests), "a trimmed output is stored as a replacement"
    assert any(TRIMMED_NOTICE in json.dumps(r.get("replaced")) for r in requests)
    stored = sum(len(json.dumps(r)) for r in requests)
    whole = sum(len(json.dumps(w.body)) for w in model_server.requests)
    assert stored < whole / 2, (stored, whole)


def test_a_long_conversation_stores_each_message_once() -> None:
    """200 calls of a growing conversation: the stored requests add up to the messages said, not
    to 200 copies of the conversation."""
    log, reader = RequestLog(), RequestReader()
    tools = [ToolSpec(name="bash", description="Run a command.", parameters={"type": "object"})]
    messages = [Message(role="user", content="task " * 200)]
    stored = 0
    for turn in range(200):
        request = log.record("system prompt", messages, tools, max_output_tokens=100)
        stored += len(json.dumps(request))
        full = reader.read(ModelRequest.model_validate(request))
        assert [m.content for m in full.messages] == [m.content for m in messages]
        messages.append(Message(role="assistant", content=f"step {turn}"))
        messages.append(Message(role="user", content=f"output {turn} " * 50))
    said = sum(len(m.content) for m in messages)
    assert stored < 2 * said, (stored, said)


def test_a_request_that_does_not_follow_its_base_is_refused() -> None:
    log = RequestLog()
    first = log.record("s", [Message(role="user", content="a")], [], max_output_tokens=1)
    second = log.record("s", [Message(role="user", content="a"), Message(role="user", content="b")], [],
                        max_output_tokens=1)
    assert second["keep"] == 1 and second["extends"] == 1 and "system" not in second
    with pytest.raises(RequestChainError, match="request of call 2 extends call 1; last read: none"):
        RequestReader().read(ModelRequest.model_validate(second))
    reader = RequestReader()
    reader.read(ModelRequest.model_validate(first))
    assert [m.content for m in reader.read(ModelRequest.model_validate(second)).messages] == ["a", "b"]


def test_old_model_call_rows_still_parse_as_version_1() -> None:
    old = {"model": "m", "input_tokens": 1, "output_tokens": 2, "cached_tokens": 0, "cost_usd": 0.0, "wait_s": 0.1,
           "text": "hi"}
    assert isinstance(parse_event("model_call", {"v": 1, **old}), ModelCallV1)
    assert isinstance(parse_event("model_call", old), ModelCallV1)
    written = validate_event("model_call", old)
    assert written["v"] == 2 and isinstance(parse_event("model_call", written), ModelCall)
