"""Streaming through the gateway, in all three APIs: the real `openai` and `anthropic` SDKs as clients,
tests/fake_model_server.py as the upstream (OpenAI-compatible or Anthropic, streaming real server-sent
events) or the tiny local model of tests/test_gateway.py, and a real SQLite meter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from rebench.gateway import GatewayServer, upstream_price
from rebench.gateway.upstream_http import AnthropicUpstream, OpenAIWireUpstream
from rebench.gateway.upstream_local import LocalUpstream
from rebench.store.db import Store

from .fake_model_server import FakeModelServer
from .test_gateway import TinyModel, attempt_row, gateway, rows

HANG = 20.0
"""No test here waits on the gateway longer than this: past it, it hangs."""


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "gw.db")


@pytest.fixture(autouse=True)
def provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-harness")


def config(upstream: str, **fields: Any) -> Any:
    return gateway(upstream=upstream, local_model=None if not upstream.startswith("local/") else "model.py",
                   max_tokens=64, **fields)


@asynccontextmanager
async def serving(store: Store, upstream: str, fake: FakeModelServer | None = None,
                  **fields: Any) -> AsyncIterator[tuple[GatewayServer, str]]:
    """A gateway in front of `fake` (as an OpenAI-compatible or an Anthropic upstream) or of TinyModel."""
    settings = config(upstream, **fields)
    backend: Any
    if upstream.startswith("anthropic/"):
        assert fake is not None
        backend = AnthropicUpstream("served", settings.timeout_s, settings.max_tokens, fake.url)
    elif upstream.startswith("local/"):
        backend = LocalUpstream(TinyModel(), settings.model, settings.max_tokens)
    else:
        assert fake is not None
        backend = OpenAIWireUpstream("openai-compatible", "served", fake.openai_url, settings.timeout_s)
    server = GatewayServer(settings, backend, store=store, attempt_id=attempt_row(store),
                           price=upstream_price(settings))
    port = await server.start_tcp()
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        await server.close()


def oai(url: str, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=HANG)


def ant(url: str, token: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key=token, max_retries=0, timeout=HANG)


USER = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
TOOL = {"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": SCHEMA}}
CALL = {"name": "bash", "arguments": {"command": "ls -la"}}


async def chat_stream(sdk: openai.AsyncOpenAI, **extra: Any) -> tuple[list[str], list[Any]]:
    """The text deltas and every chunk of one streamed chat completion."""
    chunks = [c async for c in await sdk.chat.completions.create(model="tiny-1", messages=USER, stream=True, **extra)]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    return texts, chunks


@pytest.mark.slow
def test_streams_pass_through_chunk_by_chunk_and_are_charged_their_final_usage(store: Store) -> None:
    steps = [{"text": "one two three four", "usage": {"input_tokens": 9, "output_tokens": 4}}] * 4

    async def go(fake: FakeModelServer, anthropic_fake: FakeModelServer) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(store, "openai-compatible/served", fake) as (server, url):
            sdk = oai(url, server.meters["agent"].token)
            seen["chat"] = await chat_stream(sdk)
            seen["chat_usage"] = await chat_stream(sdk, stream_options={"include_usage": True})
            seen["responses"] = [e async for e in await sdk.responses.create(model="tiny-1", input="hi", stream=True)]
        async with serving(store, "anthropic/served", anthropic_fake) as (server, url), \
                ant(url, server.meters["agent"].token).messages.stream(model="tiny-1", max_tokens=100,
                                                                       messages=USER) as stream:
            seen["messages"] = [text async for text in stream.text_stream]
            seen["message"] = await stream.get_final_message()
        return seen

    with FakeModelServer(steps) as fake, FakeModelServer(steps[:1]) as anthropic_fake:
        seen = asyncio.run(go(fake, anthropic_fake))
        sent = [r.body for r in fake.requests] + [r.body for r in anthropic_fake.requests]
    assert seen["chat"][0] == ["one ", "two ", "three ", "four"]  # the upstream's chunks, one by one
    assert all(c.usage is None for c in seen["chat"][1])  # the gateway asked for usage; this caller did not
    assert seen["chat_usage"][1][-1].usage.completion_tokens == 4
    kinds = [e.type for e in seen["responses"]]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e.delta for e in seen["responses"] if e.type == "response.output_text.delta"] == seen["chat"][0]
    assert seen["messages"] == seen["chat"][0] and seen["message"].usage.output_tokens == 4
    assert all(body["stream"] is True for body in sent)
    assert sent[0]["stream_options"] == {"include_usage": True} and sent[0]["max_tokens"] == 64
    metered = rows(store)
    assert [(r.endpoint, r.status, r.input_tokens, r.output_tokens) for r in metered] == [
        ("/v1/chat/completions", 200, 9, 4), ("/v1/chat/completions", 200, 9, 4), ("/v1/responses", 200, 9, 4),
        ("/v1/messages", 200, 9, 4)]
    assert all(r.cost_usd == pytest.approx((9 * 1000 + 4 * 2000) / 1e6) for r in metered)


def test_tool_calls_pass_through_unchanged_in_both_providers_formats(store: Store) -> None:
    anthropic_tool = {"name": "bash", "description": "run a command",
                      "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}

    async def go(fake: FakeModelServer, anthropic_fake: FakeModelServer) -> list[Any]:
        async with serving(store, "openai-compatible/served", fake) as (server, url):
            sdk = oai(url, server.meters["agent"].token)
            whole = await sdk.chat.completions.create(model="tiny-1", messages=USER, tools=[TOOL])
            _, chunks = await chat_stream(sdk, tools=[TOOL])
        async with serving(store, "anthropic/served", anthropic_fake) as (server, url):
            client = ant(url, server.meters["agent"].token)
            message = await client.messages.create(model="tiny-1", max_tokens=100, messages=USER,
                                                   tools=[anthropic_tool])  # type: ignore[list-item]
            async with client.messages.stream(model="tiny-1", max_tokens=100, messages=USER,
                                              tools=[anthropic_tool]) as stream:  # type: ignore[list-item]
                streamed = await stream.get_final_message()
        return [whole, chunks, message, streamed]

    with FakeModelServer([{"tool_calls": [CALL]}] * 2) as fake, \
            FakeModelServer([{"tool_calls": [CALL]}] * 2) as anthropic_fake:
        whole, chunks, message, streamed = asyncio.run(go(fake, anthropic_fake))
        sent_tools = [r.body["tools"] for r in fake.requests + anthropic_fake.requests]
    call = whole.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("bash", '{"command": "ls -la"}')
    streamed_args = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                            for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    assert streamed_args == '{"command": "ls -la"}'
    for reply in (message, streamed):
        assert [(b.type, b.name, b.input) for b in reply.content] == [("tool_use", "bash", {"command": "ls -la"})]
    assert sent_tools == [[TOOL], [TOOL], [anthropic_tool], [anthropic_tool]]  # unchanged


@pytest.mark.slow
def test_a_stream_cut_by_the_upstream_ends_with_an_error_event_not_a_hang(store: Store) -> None:
    """Dropped mid-body (502) or stalled past the gateway's timeout of 1 s (504), in each client's API."""
    cut = {"text": "a b c d e f", "cut_after": 4}
    stalled = {**cut, "cut": "stall", "stall_s": 8}

    async def chat(url: str, token: str) -> None:
        await chat_stream(oai(url, token))

    async def responses(url: str, token: str) -> None:
        async for _ in await oai(url, token).responses.create(model="tiny-1", input="hi", stream=True):
            pass

    async def messages(url: str, token: str) -> None:
        async with ant(url, token).messages.stream(model="tiny-1", max_tokens=50, messages=USER) as stream:
            async for _ in stream:
                pass

    async def go(fake: FakeModelServer, anthropic_fake: FakeModelServer) -> list[str]:
        errors = []
        for upstream, backend, ask in (("openai-compatible/served", fake, chat), ("openai-compatible/served", fake,
                                       responses), ("anthropic/served", anthropic_fake, messages)):
            async with serving(store, upstream, backend, timeout_s=1) as (server, url):
                for _ in range(2):
                    with pytest.raises((openai.APIError, anthropic.APIError)) as failed:
                        await asyncio.wait_for(ask(url, server.meters["agent"].token), HANG)
                    errors.append(str(failed.value))
        return errors

    with FakeModelServer([cut, stalled] * 2) as fake, FakeModelServer([cut, stalled]) as anthropic_fake:
        errors = asyncio.run(go(fake, anthropic_fake))
    assert all("ended before its last event" in e or "broke" in e for e in errors[0::2]), errors
    assert all("sent nothing for 1 s" in e for e in errors[1::2]), errors
    metered = rows(store)
    assert [r.status for r in metered] == [502, 504] * 3
    worst = metered[0].cost_usd
    assert worst > 0 and all("charged its reservation" in (r.error or "") for r in metered)


@pytest.mark.slow
def test_looping_until_refused_ends_in_a_429_and_never_spends_past_the_credit(store: Store) -> None:
    """Four clients stream in a loop: each ends refused, and the credit is never overshot (the worst case of
    each request is reserved before it is sent, so the overshoot stays under the concurrency limit's worth)."""

    async def loop(url: str, token: str, api: str) -> int:
        for _ in range(200):
            try:
                if api == "chat":
                    await chat_stream(oai(url, token), max_tokens=64)
                else:
                    async with ant(url, token).messages.stream(model="tiny-1", max_tokens=64, messages=USER) as s:
                        await s.get_final_message()
            except (openai.RateLimitError, anthropic.RateLimitError) as exc:
                assert "credit spent" in str(exc)
                return 429
        return 200

    async def go(fake: FakeModelServer, anthropic_fake: FakeModelServer) -> list[int]:
        statuses = []
        for upstream, backend, api in (("openai-compatible/served", fake, "chat"),
                                       ("anthropic/served", anthropic_fake, "messages")):
            async with serving(store, upstream, backend, credit_usd=1.0, concurrency=4) as (server, url):
                token = server.meters["agent"].token
                statuses += await asyncio.wait_for(asyncio.gather(*(loop(url, token, api) for _ in range(4))), 60)
        return statuses

    step = {"text": "x", "generate_max": True}  # a provider writing all max_tokens allows: $0.128 a request
    with FakeModelServer([step] * 200) as fake, FakeModelServer([step] * 200) as anthropic_fake:
        statuses = asyncio.run(go(fake, anthropic_fake))
    assert statuses == [429] * 8
    for attempt in {r.attempt_id for r in rows(store)}:
        paid = [r for r in rows(store) if r.attempt_id == attempt]
        assert 0.5 < sum(r.cost_usd for r in paid) <= 1.0
        assert [r.status for r in paid if r.status != 200] == [429] * 4
