"""The OpenAI and Anthropic adapters, through the real SDK clients, against the fake server."""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig, LimitExceeded
from rebench.models import (
    Message,
    ModelCaller,
    ProviderError,
    RetryPolicy,
    ToolCall,
    ToolSpec,
    create_model_client,
    model_price,
    model_spec,
)
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_for, model_server, prices_file, provider_keys  # noqa: F401
from tests.scratch_context import ScratchContext

PROVIDERS = ["openai", "anthropic", "openai-compatible"]
BASH = ToolSpec(
    name="bash",
    description="run a command",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)


def config_for(provider: str, server: FakeModelServer, **extra: object) -> AgentConfig:
    return AgentConfig(name="modular", **model_for(provider, server), **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_tool_calls_text_and_usage_round_trip(
    provider: str, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path
) -> None:
    model_server.add(
        {
            "text": "Let me look.",
            "tool_calls": [call("bash", command="ls -la")],
            "usage": {"input_tokens": 1200, "output_tokens": 30, "cached_tokens": 1000},
        },
        {"text": "All done.", "usage": {"input_tokens": 1300, "output_tokens": 5}},
    )
    client = create_model_client(config_for(provider, model_server))

    async def go() -> None:
        messages = [Message(role="user", content="task")]
        first = await client.complete("be brief", messages, [BASH], max_output_tokens=256)
        assert first.text == "Let me look."
        assert [(c.name, c.arguments) for c in first.tool_calls] == [("bash", {"command": "ls -la"})]
        assert (first.input_tokens, first.output_tokens, first.cached_tokens) == (1200, 30, 1000)
        messages += [
            Message(role="assistant", content=first.text, tool_calls=first.tool_calls),
            Message(role="tool", tool_call_id=first.tool_calls[0].id, tool_name="bash", content="total 0"),
            Message(role="user", content="[Time: 1m of 5m used]"),
        ]
        second = await client.complete("be brief", messages, [BASH], max_output_tokens=256)
        assert second.text == "All done." and not second.tool_calls
        await client.close()

    asyncio.run(go())
    last = model_server.requests[-1]
    assert last.api == ("anthropic" if provider == "anthropic" else "openai")
    assert "total 0" in last.text and "[Time: 1m of 5m used]" in last.text
    assert last.body["model"] == "scripted"
    names = [t.get("name") or t["function"]["name"] for t in last.body["tools"]]
    assert names == ["bash"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_keys_travel_only_in_the_auth_header(
    provider: str, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path
) -> None:
    model_server.require_key = provider_keys[
        "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    ]
    model_server.add({"text": "ok"})
    client = create_model_client(config_for(provider, model_server))
    result = asyncio.run(client.complete("", [Message(role="user", content="hi")], [], max_output_tokens=16))
    assert result.text == "ok"
    assert model_server.require_key not in json.dumps(model_server.requests[0].body)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_errors_are_classified_and_keys_redacted(
    provider: str, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path
) -> None:
    key = provider_keys["ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"]
    model_server.add(
        {"status": 429, "retry_after": 7, "error": "slow down"},
        {"status": 401, "error": f"Incorrect API key provided: {key}"},
        {"status": 400, "error": "prompt is too long: 250000 tokens > 200000 maximum context length"},
        {"status": 503},
    )
    client = create_model_client(config_for(provider, model_server))

    async def attempt() -> ProviderError:
        with pytest.raises(ProviderError) as err:
            await client.complete("", [Message(role="user", content="hi")], [], max_output_tokens=16)
        return err.value

    async def go() -> list[ProviderError]:
        errors = [await attempt() for _ in range(4)]
        await client.close()
        return errors

    limited, unauthorized, overflow, unavailable = asyncio.run(go())
    assert limited.retryable and limited.status == 429 and limited.retry_after_s == 7
    assert not unauthorized.retryable and unauthorized.status == 401 and key not in str(unauthorized)
    assert not overflow.retryable and overflow.context_overflow
    assert unavailable.retryable and unavailable.retry_after_s is None
    # who is blamed when such an error ends an attempt: a bad key is the user's, an outage is not the agent's
    assert unauthorized.error_source == "user" and unauthorized.stops_campaign
    variable = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    assert f"rejected the API key in ${variable} (HTTP 401" in str(unauthorized)
    assert not unavailable.stops_campaign and not overflow.stops_campaign
    assert overflow.error_source == "agent"  # keeping the conversation inside the window is the agent's job
    assert unavailable.error_source == "infrastructure" and limited.error_source == "infrastructure"


def test_unreachable_server_is_a_retryable_connection_error(provider_keys: dict[str, str]) -> None:
    client = create_model_client(
        AgentConfig(name="m", model="openai-compatible/x", base_url="http://127.0.0.1:9/v1")
    )
    with pytest.raises(ProviderError) as err:
        asyncio.run(client.complete("", [Message(role="user", content="hi")], [], max_output_tokens=8))
    assert err.value.retryable and "connection" in str(err.value)


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_caller_retries_inside_paused_intervals_and_records_usage(
    provider: str,
    model_server: FakeModelServer,
    provider_keys: dict[str, str],
    prices_file: Path,
    tmp_path: Path,
) -> None:
    model_server.add(
        {"status": 429, "retry_after": 0.4},
        {"status": 529, "error": "overloaded"},
        {"text": "hello", "usage": {"input_tokens": 1000, "output_tokens": 500}, "delay_s": 0.2},
    )
    config = config_for(provider, model_server)
    ctx = ScratchContext(tmp_path, config)
    caller = ModelCaller(
        create_model_client(config),
        ctx,
        model_price(config, model_spec(config)),
        RetryPolicy(base_delay_s=0.3, max_delay_s=5),
    )
    result = asyncio.run(
        caller.complete("", [Message(role="user", content="hi")], [], max_output_tokens=16, turn=1)
    )
    assert result.text == "hello"
    pauses = ctx.clock.pauses
    assert [p.reason for p in pauses] == ["provider-retry", "provider-retry"]
    # the provider's retry_after (0.4 s), not the policy's 0.3 s base; a loaded machine only lengthens it
    # (0.63 s in a CI run beside two busy workers)
    assert 0.35 <= pauses[0].length(0) <= 1.5
    assert pauses[1].length(0) >= 0.3
    assert ctx.clock.working_seconds() <= ctx.clock.wall_seconds() - 0.7
    assert ctx.kinds().count("provider-retry") == 2
    (usage,) = ctx.usages
    assert (usage.input_tokens, usage.output_tokens) == (1000, 500)
    assert usage.cost_usd == pytest.approx(1000 * 1000 / 1e6 + 500 * 2000 / 1e6)
    assert usage.wait_s >= 0.2 and usage.extra["retries"] == 2
    event = dict(ctx.events)["model_call"]
    assert event["text"] == "hello" and event["turn"] == 1 and event["model"] == config.model


def test_caller_gives_up_after_max_retries(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(*[{"status": 500}] * 3)
    config = config_for("openai", model_server)
    ctx = ScratchContext(tmp_path, config)
    caller = ModelCaller(
        create_model_client(config),
        ctx,
        model_price(config, model_spec(config)),
        RetryPolicy(max_retries=2, base_delay_s=0.01),
    )
    with pytest.raises(ProviderError, match="HTTP 500"):
        asyncio.run(caller.complete("", [Message(role="user", content="hi")], [], max_output_tokens=16))
    assert ctx.kinds() == ["provider-retry", "provider-retry", "model-error"]
    assert len(model_server.requests) == 3 and not ctx.usages


def test_limits_raise_after_the_call_is_recorded(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add({"text": "a", "usage": {"input_tokens": 600, "output_tokens": 10}})
    config = config_for("openai", model_server, token_limit=500)
    ctx = ScratchContext(tmp_path, config)
    caller = ModelCaller(create_model_client(config), ctx, model_price(config, model_spec(config)))
    with pytest.raises(LimitExceeded) as err:
        asyncio.run(caller.complete("", [Message(role="user", content="hi")], [], max_output_tokens=16))
    assert err.value.which == "tokens" and len(ctx.usages) == 1
    assert ctx.attempt().input_tokens == 600 and ctx.attempt().output_tokens == 10
    assert ctx.kinds() == ["model_call", "limit"] and ctx.limit_reason == "tokens"


def test_neutral_conversation_maps_to_each_wire_format() -> None:
    from rebench.models.anthropic_provider import to_anthropic_messages
    from rebench.models.openai_provider import to_openai_messages

    call_a = ToolCall(id="a", name="bash", arguments={"command": "ls"})
    call_b = ToolCall(id="b", name="score")
    conversation = [
        Message(role="user", content="task"),
        Message(role="assistant", content="", tool_calls=[call_a, call_b]),
        Message(role="tool", tool_call_id="a", tool_name="bash", content="x"),
        Message(role="tool", tool_call_id="b", tool_name="score", content=""),
        Message(role="user", content="[Time]"),
        Message(role="assistant", content=""),
        Message(role="user", content="use a tool"),
    ]
    wire = to_openai_messages("sys", conversation)
    assert [m["role"] for m in wire] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
        "assistant",
        "user",
    ]
    assert wire[2]["content"] is None and wire[6]["content"] == ""
    assert json.loads(wire[2]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}

    turns = to_anthropic_messages(conversation)
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant", "user"]
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "tool_result", "text"]
    assert turns[2]["content"][1]["content"] == "(empty)"
    assert turns[3]["content"] == [{"type": "text", "text": "(no reply)"}]
    marked = [b for t in turns for b in t["content"] if "cache_control" in b]
    assert marked == [turns[-1]["content"][-1]]
