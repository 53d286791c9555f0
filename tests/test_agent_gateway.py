"""An installed agent's gateway (rebench.gateway.agent_meter) as its flight recorder: the real `anthropic`
SDK, streaming over the gateway's Unix socket, against the fake model server on 127.0.0.1; the attempt's
context is the runner's own (tests/scratch_context.py: real recorder, real SQLite)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from sqlalchemy import select

from rebench.agents.base import AgentConfig
from rebench.gateway.agent_meter import AgentGateway, agent_gateway_config
from rebench.gateway.policy import PolicyError, allowed_betas
from rebench.gateway.transcript import said
from rebench.store.models import GatewayRequest
from tests.fake_model_server import FakeModelServer
from tests.scratch_context import ScratchContext

KEY = "sk-provider-agent-gateway-test"
TOOL = {"name": "Bash", "description": "run", "input_schema": {"type": "object", "properties": {
    "command": {"type": "string"}}}}


def _client(gateway: AgentGateway) -> anthropic.AsyncAnthropic:
    transport = httpx2.AsyncHTTPTransport(uds=gateway.socket_path)
    return anthropic.AsyncAnthropic(api_key=gateway.token, base_url="http://gateway", max_retries=0,
                                    http_client=httpx2.AsyncClient(transport=transport))


async def _ask(client: anthropic.AsyncAnthropic, text: str) -> Any:
    async with client.messages.stream(model="claude-test", max_tokens=64, tools=[TOOL],  # type: ignore[list-item]
                                      messages=[{"role": "user", "content": text}],
                                      extra_headers={"anthropic-beta": "context-management-2025-06-27,"
                                                                       "effort-2025-11-24"}) as stream:
        return await stream.get_final_message()


def _context(tmp_path: Path, server: FakeModelServer, **limits: Any) -> ScratchContext:
    config = AgentConfig(name="claude-code", model="anthropic/claude-test", base_url=server.url, **limits)
    return ScratchContext(tmp_path, config)


def test_every_call_is_a_model_call_event_with_its_tool_calls_and_bodies(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    steps = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "task score"}}],
              "usage": {"input_tokens": 300, "output_tokens": 12}}]
    with FakeModelServer(steps, require_key=KEY) as server:
        ctx = _context(tmp_path, server)
        gateway = AgentGateway(agent_gateway_config(ctx.config, 4096), tmp_path / "calls")

        async def go() -> Any:
            await gateway.start(ctx)
            try:
                return await _ask(_client(gateway), "score it")
            finally:
                await gateway.close()

        reply = asyncio.run(go())
    assert reply.content[0].name == "Bash"
    calls = [data for kind, data in ctx.events if kind == "model_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call["tool_calls"] == [{"id": reply.content[0].id, "name": "Bash", "arguments": {"command": "task score"}}]
    assert (call["input_tokens"], call["output_tokens"]) == (300, 12)
    assert call["wait_s"] > 0 and ctx.clock.model_wait_s > 0
    assert Path(call["extra"]["body_file"]).is_file() and call["extra"]["stream"] is True
    sent = server.requests[0].headers
    assert sent.get("anthropic-beta") == "context-management-2025-06-27,effort-2025-11-24"
    # its row is the agent's own model call, not an environment gateway's "agent" row that reports count
    with ctx.store.session() as session:
        assert [row.meter for row in session.scalars(select(GatewayRequest))] == ["agent_model"]
    assert sent.get("x-api-key") == KEY


def test_past_the_token_limit_requests_are_refused_and_the_agent_stopped(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    steps: list[dict[str, Any]] = [{"text": "one", "usage": {"input_tokens": 900, "output_tokens": 200}},
                                   {"text": "two"}]
    with FakeModelServer(steps, require_key=KEY) as server:
        ctx = _context(tmp_path, server, token_limit=1000)
        gateway = AgentGateway(agent_gateway_config(ctx.config, 4096), tmp_path / "calls")

        async def go() -> Any:
            await gateway.start(ctx)
            client = _client(gateway)
            try:
                await _ask(client, "first")
                with pytest.raises(anthropic.RateLimitError):
                    await _ask(client, "second")
            finally:
                await gateway.close()

        asyncio.run(go())
    assert gateway.limit is not None and gateway.limit.which == "tokens"
    assert len(server.requests) == 1  # the refused request never reached the provider
    assert [data["which"] for kind, data in ctx.events if kind == "limit"] == ["tokens"]


def test_the_reply_is_read_from_each_apis_stream() -> None:
    messages = (b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                b'"content_block":{"type":"text","text":""}}\n\n'
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
                b'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
                b'"content_block":{"type":"tool_use","id":"t1","name":"Bash","input":{}}}\n\n'
                b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
                b'"delta":{"type":"input_json_delta","partial_json":"{\\"command\\": \\"ls\\"}"}}\n\n')
    assert said("messages", None, messages) == ("hi", [{"id": "t1", "name": "Bash", "arguments": {"command": "ls"}}])
    responses = (b'event: response.completed\ndata: {"type":"response.completed","response":{"output":['
                 b'{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{}"}]}}\n\n')
    assert said("responses", None, responses) == ("", [{"id": "c1", "name": "exec_command", "arguments": "{}"}])
    chat = (b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
            b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"f",'
            b'"arguments":"{}"}}]}}]}\n\ndata: [DONE]\n\n')
    assert said("chat", None, chat) == ("a", [{"id": "x", "name": "f", "arguments": "{}"}])


def test_only_known_anthropic_betas_pass() -> None:
    assert allowed_betas("claude-code-20250219, effort-2025-11-24,effort-2025-11-24") == \
        "claude-code-20250219,effort-2025-11-24"
    assert allowed_betas(None) is None and allowed_betas(" , ") is None
    for refused in ("files-api-2025-04-14", "claude-code-20250219,mcp-client-2025-04-04", "claude-code",
                    "claude-code-side-query-2026-09-29", "effort-2025-11-24x"):
        with pytest.raises(PolicyError, match="anthropic-beta flag '"):
            allowed_betas(refused)


def test_provider_refusals_are_retried_off_the_agents_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    steps: list[dict[str, Any]] = [{"status": 529}, {"status": 500}, {"text": "answered"}]
    with FakeModelServer(steps, require_key=KEY) as server:
        ctx = _context(tmp_path, server)
        gateway = AgentGateway(agent_gateway_config(ctx.config, 4096), tmp_path / "calls", retry_base_s=0.2)

        async def go() -> Any:
            await gateway.start(ctx)
            try:
                return await _ask(_client(gateway), "hello")
            finally:
                await gateway.close()

        reply = asyncio.run(go())
    assert reply.content[0].text == "answered" and len(server.requests) == 3
    paused = [p for p in ctx.clock.pauses if p.reason == "provider-retry"]
    assert len(paused) == 2 and sum(p.length(0.0) for p in paused) >= 0.2 + 0.4 - 0.05


def test_a_request_past_the_cost_limit_is_refused_and_ends_the_attempt_as_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."anthropic/claude-test"]\ninput_per_mtok = 1000.0\noutput_per_mtok = 1000.0\n')
    monkeypatch.setenv("REBENCH_PRICES", str(prices))
    steps: list[dict[str, Any]] = [{"text": "a", "usage": {"input_tokens": 400, "output_tokens": 10}}] * 5
    with FakeModelServer(steps, require_key=KEY) as server:
        ctx = _context(tmp_path, server, cost_limit_usd=1.0)
        gateway = AgentGateway(agent_gateway_config(ctx.config, 4096), tmp_path / "calls")

        async def go() -> int:
            await gateway.start(ctx)
            client = _client(gateway)
            answered = 0
            try:
                for _ in range(5):
                    try:
                        await _ask(client, "again")
                    except anthropic.RateLimitError:
                        break
                    answered += 1
            finally:
                await gateway.close()
            return answered

        answered = asyncio.run(go())
    # each call costs $0.41 and reserves its worst case first (the JSON's bytes in + 64 out at $1000/Mtok):
    # after two, what is left of the $1 limit cannot cover a third, which the provider never sees
    assert answered == 2 and len(server.requests) == 2
    assert gateway.limit is not None and gateway.limit.which == "cost"
    assert [data["which"] for kind, data in ctx.events if kind == "limit"] == ["cost"]
