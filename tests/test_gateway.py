"""The model gateway in-process: the real `openai` SDK as the client, a real SQLite meter, the
tiny local model written below (a test double for a trained model: deterministic words, no
learning) and tests/fake_model_server.py as an OpenAI-compatible upstream."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from rebench.environments.metadata import Gateway
from rebench.gateway import GatewayServer, LocalCompletion, request_seed, upstream_price
from rebench.gateway.upstream_http import OpenAIWireUpstream
from rebench.gateway.upstream_local import LocalUpstream
from rebench.gateway.usage import gateway_usage
from rebench.store.db import Store
from rebench.store.models import Attempt, GatewayRequest

from .fake_model_server import FakeModelServer


class TinyModel:
    """Answers with seeded random words; `sleep:S` in the prompt sleeps S seconds."""

    name = "tiny"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        return " ".join(str(m["content"]) for m in messages)

    def generate(self, prompt: str, *, n: int, temperature: float, max_tokens: int,
                 seed: int) -> list[LocalCompletion]:
        self.calls.append({"prompt": prompt, "n": n, "seed": seed, "max_tokens": max_tokens})
        for word in prompt.split():
            if word.startswith("sleep:"):
                time.sleep(float(word[6:]))
        rng = random.Random(seed)
        return [LocalCompletion(text=" ".join(rng.choice("abcdefgh") for _ in range(max_tokens)),
                                output_tokens=max_tokens) for _ in range(n)]


def gateway(**fields: Any) -> Gateway:
    values: dict[str, Any] = {"model": "tiny-1", "upstream": "local/tiny", "local_model": "model.py",
                              "price_input_per_mtok": 1000.0, "price_output_per_mtok": 2000.0,
                              "max_tokens": 8, "timeout_s": 5, **fields}
    return Gateway(**values)


def attempt_row(store: Store) -> int:
    with store.session() as session:
        row = Attempt(environment="gw", profile="tiny", agent="test", budget_s=60.0)
        session.add(row)
        session.flush()
        return row.id


@asynccontextmanager
async def serving(store: Store, config: Gateway, upstream: Any | None = None,
                  credit: float | None = None) -> AsyncIterator[tuple[GatewayServer, str]]:
    model = TinyModel()
    server = GatewayServer(config, upstream or LocalUpstream(model, config.model, config.max_tokens),
                           store=store, attempt_id=attempt_row(store), price=upstream_price(config),
                           credit_usd=credit)
    port = await server.start_tcp()
    try:
        yield server, f"http://127.0.0.1:{port}/v1"
    finally:
        await server.close()


def client(url: str, token: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=token, max_retries=0, timeout=20)


def rows(store: Store) -> list[GatewayRequest]:
    with store.session() as session:
        found = list(session.query(GatewayRequest).order_by(GatewayRequest.id))
        session.expunge_all()
        return found


def run(store: Store, config: Gateway, body: Callable[[GatewayServer, str], Awaitable[Any]], **kw: Any) -> Any:
    async def go() -> Any:
        async with serving(store, config, **kw) as (server, url):
            return await body(server, url)

    return asyncio.run(go())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "gw.db")


def test_chat_and_completions_through_the_sdk_are_metered(store: Store) -> None:
    async def body(server: GatewayServer, url: str) -> tuple[Any, Any, Any]:
        sdk = client(url, server.meters["agent"].token)
        chat = await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "a b c"}],
                                                 n=3, max_tokens=4)
        text = await sdk.completions.create(model="tiny-1", prompt="x y", max_tokens=100)
        models = await sdk.models.list()
        return chat, text, models

    chat, text, models = run(store, gateway(), body)
    assert len(chat.choices) == 3 and all(len(c.message.content.split()) == 4 for c in chat.choices)
    assert chat.usage.prompt_tokens == 3 and chat.usage.completion_tokens == 12
    assert len(text.choices[0].text.split()) == 8  # capped at the gateway's max_tokens
    assert [m.id for m in models.data] == ["tiny-1"]
    metered = rows(store)
    assert [(r.meter, r.endpoint, r.status) for r in metered] == [
        ("agent", "/v1/chat/completions", 200), ("agent", "/v1/completions", 200)]
    assert metered[0].cost_usd == pytest.approx((3 * 1000 + 12 * 2000) / 1e6)
    with store.session() as session:
        usage = gateway_usage(session, [metered[0].attempt_id])[metered[0].attempt_id]["agent"]
    assert usage.requests == 2 and usage.output_tokens == 20 and usage.refused == 0


def test_same_request_same_answer_whatever_the_order(store: Store) -> None:
    async def body(server: GatewayServer, url: str) -> list[list[str]]:
        sdk = client(url, server.meters["agent"].token)

        async def ask(content: str, seed: int | None = None) -> str:
            extra = {"seed": seed} if seed is not None else {}
            reply = await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": content}],
                                                      **extra)
            return str(reply.choices[0].message.content)

        prompts = [f"p{i}" for i in range(6)]
        forward = await asyncio.gather(*(ask(p) for p in prompts))
        backward = await asyncio.gather(*(ask(p) for p in reversed(prompts)))
        seeded = [await ask("p0", seed=1), await ask("p0", seed=2)]
        return [list(forward), list(reversed(backward)), seeded]

    forward, backward, seeded = run(store, gateway(), body)
    assert forward == backward
    assert len(set(forward)) == len(forward)
    assert seeded[0] != seeded[1]  # the caller's own seed is part of the request
    assert request_seed({"a": 1, "b": 2}) == request_seed({"b": 2, "a": 1})


def test_wrong_or_missing_token_is_401_and_another_model_is_refused(store: Store) -> None:
    async def body(server: GatewayServer, url: str) -> list[Any]:
        errors: list[Any] = []
        for token in ("wrong-token", ""):
            with pytest.raises(openai.AuthenticationError) as caught:
                await client(url, token or "x").chat.completions.create(
                    model="tiny-1", messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"Authorization": f"Bearer {token}"} if token else {"Authorization": ""})
            errors.append(caught.value)
        with pytest.raises(openai.NotFoundError) as other:
            await client(url, server.meters["agent"].token).chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        errors.append(other.value)
        return errors

    errors = run(store, gateway(), body)
    assert all(e.status_code == 401 for e in errors[:2])
    assert "'tiny-1'" in str(errors[2]) and "gpt-4o" in str(errors[2])
    assert [(r.meter, r.status) for r in rows(store)] == [("unauthorized", 401), ("unauthorized", 401),
                                                          ("agent", 404)]


def test_credit_is_enforced_per_meter_and_the_scorer_pays_its_own(store: Store) -> None:
    async def body(server: GatewayServer, url: str) -> tuple[list[int], int]:
        agent = client(url, server.meters["agent"].token)
        statuses = []
        for _ in range(4):
            try:
                await agent.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "hi"}])
                statuses.append(200)
            except openai.RateLimitError as exc:
                assert "credit spent" in str(exc)
                statuses.append(exc.status_code)
        scorer = await client(url, server.meters["scorer"].token).chat.completions.create(
            model="tiny-1", messages=[{"role": "user", "content": "hi"}])
        return statuses, len(scorer.choices)

    # one request costs 1 * 1000 / 1e6 + 8 * 2000 / 1e6 = 0.017 USD, and reserves as much before it is
    # forwarded (its prompt's exact count, and all 8 output tokens): the credit covers two, not a third
    statuses, scorer_choices = run(store, gateway(credit_usd=100.0), body, credit=0.035)
    assert statuses == [200, 200, 429, 429] and scorer_choices == 1
    metered = rows(store)
    assert [r.status for r in metered if r.meter == "agent"] == [200, 200, 429, 429]
    assert [r.status for r in metered if r.meter == "scorer"] == [200]
    assert all("credit spent" in (r.error or "") for r in metered if r.status == 429)


def test_concurrency_limit_and_timeout_end_in_an_http_error_not_a_hang(store: Store) -> None:
    async def body(server: GatewayServer, url: str) -> tuple[float, Any]:
        sdk = client(url, server.meters["agent"].token)
        started = time.monotonic()
        await asyncio.gather(*(sdk.chat.completions.create(
            model="tiny-1", messages=[{"role": "user", "content": f"sleep:0.4 {i}"}]) for i in range(4)))
        elapsed = time.monotonic() - started
        with pytest.raises(openai.APIStatusError) as slow:
            await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "sleep:1.5"}])
        return elapsed, slow.value

    elapsed, slow = run(store, gateway(concurrency=2, timeout_s=1), body)
    assert elapsed >= 0.8  # four 0.4 s requests, two at a time
    assert slow.status_code == 504 and "did not answer" in str(slow)


def test_openai_compatible_upstream_passes_answers_and_errors_through(store: Store) -> None:
    config = gateway(upstream="openai-compatible/served-name", local_model=None, price_input_per_mtok=None,
                     price_output_per_mtok=None)
    with FakeModelServer([{"text": "hello from upstream", "usage": {"input_tokens": 7, "output_tokens": 3}},
                          {"status": 503}]) as fake:
        upstream = OpenAIWireUpstream("openai-compatible", "served-name", fake.openai_url, 5)

        async def body(server: GatewayServer, url: str) -> tuple[Any, Any]:
            sdk = client(url, server.meters["agent"].token)
            ok = await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.APIStatusError) as failed:
                await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "hi"}])
            return ok, failed.value

        ok, failed = run(store, config, body, upstream=upstream)
        seen = [r.body.get("model") for r in fake.requests]
        headers = [r.headers for r in fake.requests]
    assert ok.choices[0].message.content == "hello from upstream"
    assert seen == ["served-name", "served-name"]  # the upstream's own name, not the sandbox's
    assert all("rbgw-" not in str(h) for h in headers)  # the sandbox's token stops at the gateway
    assert failed.status_code == 503
    assert [(r.status, r.input_tokens, r.output_tokens) for r in rows(store)] == [(200, 7, 3), (503, 0, 0)]


def test_provider_key_comes_from_the_harness_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from rebench.errors import RebenchError
    from rebench.gateway import check_gateway

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RebenchError, match="OPENAI_API_KEY"):
        check_gateway(gateway(upstream="openai/gpt-3.5-turbo-0125", local_model=None))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    check_gateway(gateway(upstream="openai/gpt-3.5-turbo-0125", local_model=None))
    assert os.environ["OPENAI_API_KEY"] == "sk-test"


def test_a_timed_out_generation_keeps_its_slot_until_it_really_ends(store: Store) -> None:
    """generate() cannot be stopped in its thread: after a 504 it still holds its concurrency slot,
    so timed-out requests cannot stack more work than the limit allows."""

    async def body(server: GatewayServer, url: str) -> tuple[int, float]:
        sdk = client(url, server.meters["agent"].token)
        with pytest.raises(openai.APIStatusError) as slow:
            await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "sleep:1.5"}])
        started = time.monotonic()
        await sdk.chat.completions.create(model="tiny-1", messages=[{"role": "user", "content": "quick"}])
        return slow.value.status_code, time.monotonic() - started

    status, waited = run(store, gateway(concurrency=1, timeout_s=0.5), body)
    assert status == 504
    assert waited >= 0.7  # the quick request waited for the slow generation to end (~1 s after the 504)


def test_an_oversized_body_is_413_and_garbage_is_not_a_crash(store: Store) -> None:
    async def body(server: GatewayServer, url: str) -> tuple[bytes, bytes, int]:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n")
        big = await reader.read()
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"nonsense\r\n\r\n")
        junk = await reader.read()  # answered 400, not dropped
        writer.close()
        ok = await client(url, server.meters["agent"].token).models.list()  # the server lives on
        return big, junk, len(ok.data)

    big, junk, models = run(store, gateway(), body)
    assert big.startswith(b"HTTP/1.1 413 ") and b"over" in big
    assert junk.startswith(b"HTTP/1.1 400 ") and models == 1


def test_anthropic_upstream_through_the_providers_client(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """`anthropic/MODEL`: chat completions translated to Messages by rebench.models' client, with the
    harness's key (the fake server checks it); the answer comes back in OpenAI's shape."""
    from rebench.gateway.upstream_http import AnthropicUpstream

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-harness")
    config = gateway(upstream="anthropic/claude-x", local_model=None)
    with FakeModelServer([{"text": "bonjour", "usage": {"input_tokens": 11, "output_tokens": 2}}],
                         require_key="sk-ant-harness") as fake:
        upstream = AnthropicUpstream("claude-x", 5, 64, fake.url)

        async def body(server: GatewayServer, url: str) -> Any:
            return await client(url, server.meters["agent"].token).chat.completions.create(
                model="tiny-1", messages=[{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hello"}])

        reply = run(store, config, body, upstream=upstream)
        sent = fake.requests[0].body
    assert reply.choices[0].message.content == "bonjour"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (11, 2)
    assert sent["model"] == "claude-x" and sent["system"][0]["text"] == "be brief"
    assert [(r.status, r.cost_usd) for r in rows(store)] == [(200, pytest.approx((11 * 1000 + 2 * 2000) / 1e6))]


def test_a_new_gateway_of_the_same_attempt_keeps_its_tokens_and_spending(store: Store) -> None:
    """A human attempt's next supervisor starts a new gateway: the expert's token (in the sandbox's
    api.env) goes on working and what was spent before still counts against the credit."""
    config = gateway(credit_usd=0.035)
    model = TinyModel()
    attempt_id = attempt_row(store)

    async def ask(server: GatewayServer, url: str) -> int:
        try:
            await client(url, server.meters["agent"].token).chat.completions.create(
                model="tiny-1", messages=[{"role": "user", "content": "hi"}])
            return 200
        except openai.RateLimitError as exc:
            return exc.status_code

    async def one_gateway(tokens: dict[str, str] | None, asks: int) -> tuple[dict[str, str], list[int]]:
        server = GatewayServer(config, LocalUpstream(model, config.model, config.max_tokens), store=store,
                               attempt_id=attempt_id, price=upstream_price(config))
        if tokens:
            server.use_tokens(tokens)
        url = f"http://127.0.0.1:{await server.start_tcp()}/v1"
        try:
            return {n: m.token for n, m in server.meters.items()}, [await ask(server, url) for _ in range(asks)]
        finally:
            await server.close()

    # one request costs 0.017 USD: the credit covers two, one before the new gateway and one after
    tokens, first = asyncio.run(one_gateway(None, 1))
    again, second = asyncio.run(one_gateway(tokens, 2))
    assert first == [200] and second == [200, 429]
    assert again == tokens
