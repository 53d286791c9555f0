"""An agent under test attacks the model gateway with its own requests (issue 24).

Each case is an attack the gateway used to lose: fields and sizes that reached the provider on the
operator's key, credit overshot by one request or by a burst, a request the provider served but
nobody paid for, request bodies that stalled or crashed the harness. The tests speak HTTP to a real
GatewayServer (the SDK or raw bytes on a socket) and look at what tests/fake_model_server.py, the
provider, received, so they hold whatever HTTP stack serves the gateway. Runs in-process, no Docker.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import openai
import pytest

from rebench.environments.metadata import Gateway
from rebench.gateway import GatewayServer, upstream_price
from rebench.gateway.upstream_http import OpenAIWireUpstream
from rebench.gateway.upstream_local import LocalUpstream
from rebench.store.db import Store
from rebench.store.models import GatewayRequest

from ..fake_model_server import FakeModelServer
from ..test_gateway import TinyModel, attempt_row, client, gateway, rows

pytestmark = pytest.mark.adversarial

CHAT = "/v1/chat/completions"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "gw.db")


def provider_gateway(**fields: Any) -> Gateway:
    """An openai-compatible upstream at notional prices: $0.001 an input token, $0.002 an output one."""
    values: dict[str, Any] = {"upstream": "openai-compatible/served", "local_model": None, "max_tokens": 16, **fields}
    return gateway(**values)


@asynccontextmanager
async def gateway_at(store: Store, config: Gateway, fake: FakeModelServer | None = None
                     ) -> AsyncIterator[tuple[GatewayServer, str, int]]:
    upstream: Any = (OpenAIWireUpstream("openai-compatible", "served", fake.openai_url, 10) if fake is not None
                     else LocalUpstream(TinyModel(), config.model, config.max_tokens))
    server = GatewayServer(config, upstream, store=store, attempt_id=attempt_row(store), price=upstream_price(config))
    port = await server.start_tcp()
    try:
        yield server, f"http://127.0.0.1:{port}/v1", port
    finally:
        await server.close()


async def raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are; the whole answer (the gateway closes the connection after it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def post(path: str, token: str, body: bytes, *, chunked: bool = False) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n"
    if chunked:
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + body
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def hi(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny-1", "messages": [{"role": "user", "content": "hi"}], **fields}


def spent(store: Store, meter: str | None = None) -> float:
    return sum(r.cost_usd for r in rows(store) if meter is None or r.meter == meter)


# -- what reaches the provider ------------------------------------------------------------------------

def test_only_allowed_fields_reach_the_provider_and_its_caps_are_set(store: Store) -> None:
    async def attack(fake: FakeModelServer) -> list[int]:
        async with gateway_at(store, provider_gateway(max_n=4), fake) as (server, url, _):
            sdk = client(url, server.meters["agent"].token)
            statuses = []
            for fields in ({"max_tokens": 100_000, "n": 2}, {}, {"max_completion_tokens": 99_999},
                           {"n": 128}, {"service_tier": "priority"}, {"store": True},
                           {"metadata": {"a": "b"}}, {"stream_options": {"include_usage": True}}):
                try:
                    await sdk.chat.completions.create(**hi(**fields))
                    statuses.append(200)
                except openai.APIStatusError as exc:
                    statuses.append(exc.status_code)
                    if "n" not in fields:
                        name = next(iter(fields))
                        assert name in str(exc) and "temperature" in str(exc), str(exc)
            return statuses

    with FakeModelServer([]) as fake:
        statuses = asyncio.run(attack(fake))
        received = [r.body for r in fake.requests]
    assert statuses == [200, 200, 200, 400, 400, 400, 400, 400]
    assert len(received) == 3  # nothing refused reached the provider
    assert received[0]["max_tokens"] == 16 and received[0]["n"] == 2
    assert received[1]["max_tokens"] == 16  # set explicitly when the request left it out
    assert received[2]["max_completion_tokens"] == 16
    for body in received:
        assert not {"service_tier", "store", "metadata", "stream_options"} & set(body)


def test_one_request_cannot_spend_past_the_credit(store: Store) -> None:
    """The provider writes all max_tokens allows: $200 for 100,000 tokens, against a $1 credit."""

    async def attack(fake: FakeModelServer) -> int:
        async with gateway_at(store, provider_gateway(credit_usd=1.0), fake) as (server, url, _):
            sdk = client(url, server.meters["agent"].token)
            for _ in range(60):
                try:
                    await sdk.chat.completions.create(**hi(max_tokens=100_000))
                except openai.RateLimitError:
                    return 429
            return 200

    with FakeModelServer([{"text": "x", "generate_max": True}] * 60) as fake:
        last = asyncio.run(attack(fake))
    assert last == 429  # the credit ran out, and
    assert 0 < spent(store) <= 1.0  # never past it


def test_a_burst_of_concurrent_requests_cannot_overshoot_the_credit(store: Store) -> None:
    async def attack(fake: FakeModelServer) -> list[int]:
        config = provider_gateway(credit_usd=0.3, concurrency=16)
        async with gateway_at(store, config, fake) as (server, url, _):
            sdk = client(url, server.meters["agent"].token)

            async def one() -> int:
                try:
                    await sdk.chat.completions.create(**hi(max_tokens=16))
                    return 200
                except openai.RateLimitError:
                    return 429

            return list(await asyncio.gather(*(one() for _ in range(16))))

    with FakeModelServer([{"text": "x", "generate_max": True, "delay_s": 0.3}] * 16) as fake:
        statuses = asyncio.run(attack(fake))
    assert 200 in statuses and 429 in statuses
    assert spent(store) <= 0.3


def test_a_request_served_after_the_gateway_timed_out_is_still_charged(store: Store) -> None:
    async def attack(fake: FakeModelServer) -> int:
        async with gateway_at(store, provider_gateway(timeout_s=0.5), fake) as (server, url, _):
            with pytest.raises(openai.APIStatusError) as slow:
                await client(url, server.meters["agent"].token).chat.completions.create(**hi())
            await asyncio.sleep(1.5)  # the provider answers the gateway after all
            return slow.value.status_code

    step = {"text": "late", "delay_s": 1.0, "usage": {"input_tokens": 5, "output_tokens": 10}}
    with FakeModelServer([step]) as fake:
        status = asyncio.run(attack(fake))
    assert status == 504
    assert spent(store, "agent") == pytest.approx((5 * 1000 + 10 * 2000) / 1e6)
    assert [(r.status, r.input_tokens, r.output_tokens) for r in rows(store)] == [(504, 5, 10)]


# -- request bodies -----------------------------------------------------------------------------------

def test_a_body_of_one_byte_chunks_is_read_in_linear_time_and_the_loop_stays_free(store: Store) -> None:
    body = json.dumps(hi(messages=[{"role": "user", "content": "a" * 300_000}])).encode()
    chunks = b"".join(b"1\r\n" + body[i:i + 1] + b"\r\n" for i in range(len(body))) + b"0\r\n\r\n"

    async def attack() -> tuple[bytes, float, float]:
        async with gateway_at(store, gateway()) as (server, url, port):
            started = time.monotonic()
            flood = asyncio.ensure_future(raw(port, post(CHAT, server.meters["agent"].token, chunks, chunked=True),
                                              timeout=30))
            await asyncio.sleep(0.05)
            asked = time.monotonic()
            await client(url, server.meters["agent"].token).models.list()  # meanwhile, on another connection
            other = time.monotonic() - asked
            answer = await flood
            return answer, time.monotonic() - started, other

    answer, elapsed, other = asyncio.run(attack())
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert elapsed < 4.0  # 300,000 chunks: linear work (the quadratic copy took many times longer)
    assert other < 1.0


def test_nesting_a_200000_deep_json_is_a_400_with_a_row(store: Store) -> None:
    body = b'{"model": "tiny-1", "messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"

    async def attack() -> bytes:
        async with gateway_at(store, gateway()) as (server, _, port):
            return await raw(port, post(CHAT, server.meters["agent"].token, body))

    answer = asyncio.run(attack())
    assert answer.startswith(b"HTTP/1.1 400 ") and b"deep" in answer
    assert [(r.meter, r.status) for r in rows(store)] == [("agent", 400)]


def test_malformed_requests_each_get_an_http_error_and_a_row(store: Store) -> None:
    limit = 16 * 1024 * 1024

    async def attack() -> list[bytes]:
        async with gateway_at(store, gateway()) as (server, _, port):
            server.body_idle_s = 1.0
            token = server.meters["agent"].token
            return [
                await raw(port, b"nonsense\r\n\r\n"),
                await raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nno colon here\r\n\r\n"),
                await raw(port, post(CHAT, token, b"{not json")),
                await raw(port, post(CHAT, token, b"zz\r\nab\r\n0\r\n\r\n", chunked=True)),
                # a chunk past the size limit: refused as soon as its bytes pass it, the rest not awaited
                await raw(port, post(CHAT, token, b"%x\r\n" % (limit + 10) + b"a" * (limit + 1), chunked=True),
                          timeout=5),
                # declares 17 MB in one chunk, sends three bytes and stalls: refused once the body stops coming
                await raw(port, post(CHAT, token, b"1100000\r\nabc", chunked=True), timeout=5),
                await raw(port, b"GET /v1/models HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n"),
            ]

    answers = asyncio.run(attack())
    assert [a[:12] for a in answers] == [b"HTTP/1.1 400"] * 4 + [b"HTTP/1.1 413", b"HTTP/1.1 408", b"HTTP/1.1 400"]
    assert b"over 100 headers" in answers[-1]
    assert [r.status for r in rows(store)] == [400, 400, 400, 400, 413, 408, 400]


def test_a_flood_of_bad_tokens_is_counted_not_written_row_by_row(store: Store) -> None:
    async def attack() -> list[int]:
        async with gateway_at(store, gateway()) as (_, url, _port):
            statuses = []
            for _ in range(60):
                with pytest.raises(openai.AuthenticationError) as refused:
                    await client(url, "wrong").chat.completions.create(**hi())
                statuses.append(refused.value.status_code)
            return statuses

    assert asyncio.run(attack()) == [401] * 60
    refused = rows(store)
    assert len(refused) <= 21 and all(r.meter == "unauthorized" for r in refused)
    assert "40 more" in (refused[-1].error or "")


# -- the scoring call's token -------------------------------------------------------------------------

def test_a_call_token_works_until_closed_and_is_metered_as_subject(store: Store) -> None:
    async def attack() -> tuple[int, int, list[bool]]:
        async with gateway_at(store, gateway()) as (server, url, _):
            busy: list[bool] = []
            server.meters["subject"].on_busy = busy.append
            token = server.open_call_token()
            sdk = client(url, token)
            await sdk.chat.completions.create(**hi())
            slow = asyncio.ensure_future(sdk.chat.completions.create(**hi(messages=[
                {"role": "user", "content": "sleep:0.5"}])))
            await asyncio.sleep(0.2)
            server.close_call_token(token)
            with pytest.raises(openai.AuthenticationError) as after:
                await sdk.chat.completions.create(**hi())
            done = await slow  # in flight when the token was closed: it finishes, and is paid for
            return len(done.choices), after.value.status_code, busy

    choices, status, busy = asyncio.run(attack())
    assert choices == 1 and status == 401
    assert busy[0] is True and busy[-1] is False
    subject = [r for r in rows(store) if r.meter == "subject"]
    assert [r.status for r in subject] == [200, 200] and all(r.cost_usd > 0 for r in subject)


def test_the_subject_meter_spends_the_scorers_credit(store: Store) -> None:
    """One request costs 0.017 USD (1 token in, 8 out): a 0.03 credit pays for one, whoever asks."""

    async def attack() -> list[int]:
        async with gateway_at(store, gateway(scorer_credit_usd=0.03)) as (server, url, _):
            statuses = []
            for token in (server.open_call_token(), server.meters["scorer"].token, server.open_call_token()):
                try:
                    await client(url, token).chat.completions.create(**hi())
                    statuses.append(200)
                except openai.RateLimitError as exc:
                    statuses.append(exc.status_code)
            return statuses

    assert asyncio.run(attack()) == [200, 429, 429]
    assert spent(store, "subject") == pytest.approx(0.017) and spent(store, "scorer") == 0


def test_gateway_rows_of_three_meters_are_reported(store: Store) -> None:
    from rebench.gateway.usage import gateway_usage

    attempt = attempt_row(store)
    with store.session() as session:
        for meter in ("agent", "scorer", "subject"):
            session.add(GatewayRequest(attempt_id=attempt, meter=meter, model="m", endpoint=CHAT, status=200,
                                       cost_usd=0.5))
    with store.session() as session:
        usage = gateway_usage(session, [attempt])[attempt]
    assert sorted(usage) == ["agent", "scorer", "subject"] and usage["subject"].cost_usd == 0.5


def test_the_scoring_pause_lasts_while_the_scorer_or_the_subject_waits(store: Store) -> None:
    """The runner's clock hookup (AttemptGateway.on_scorer_busy) sees one busy span for both meters."""
    from rebench.gateway import AttemptGateway

    async def spans() -> list[bool]:
        config = gateway()
        attempt = AttemptGateway(None, 0, cast(Any, None), config, assets=None, unix=False)
        attempt.server = GatewayServer(config, LocalUpstream(TinyModel(), config.model, config.max_tokens),
                                       store=None, attempt_id=0, price=upstream_price(config))
        seen: list[bool] = []
        attempt.on_scorer_busy(seen.append)
        scorer, subject = attempt.server.meters["scorer"], attempt.server.meters["subject"]
        scorer.busy(+1)
        subject.busy(+1)
        scorer.busy(-1)  # the subject still waits: the pause goes on
        assert seen == [True]
        subject.busy(-1)
        subject.busy(+1)
        subject.busy(-1)
        return seen

    assert asyncio.run(spans()) == [True, False, True, False]


# -- the Responses and Messages endpoints --------------------------------------------------------------

def test_provider_side_tools_and_provider_kept_state_never_reach_the_provider(store: Store) -> None:
    """A tool the provider runs (web search, fetching a URL, code execution, an MCP server) would be a way
    out of a sandbox with no network, paid by the operator; stored responses and background runs would keep
    the attempt's state on the provider. All refused with 400, before anything is sent."""
    responses = [{"tools": [{"type": "web_search"}]}, {"tools": [{"type": "code_interpreter", "container": {}}]},
                 {"store": True}, {"previous_response_id": "resp_1"}, {"background": True}]
    messages = [{"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
                {"mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "x"}]},
                {"metadata": {"user_id": "u", "extra": "x"}}]

    async def attack(fake: FakeModelServer) -> list[tuple[int, str]]:
        async with gateway_at(store, provider_gateway(), fake) as (server, _, port):
            token = server.meters["agent"].token
            answers = []
            for path, base, extras in (("/v1/responses", {"model": "tiny-1", "input": "hi"}, responses),
                                       ("/v1/messages", {"model": "tiny-1", "max_tokens": 8, "messages": [
                                           {"role": "user", "content": "hi"}]}, messages)):
                for extra in extras:
                    answer = await raw(port, post(path, token, json.dumps({**base, **extra}).encode()))
                    answers.append((int(answer[9:12]), answer.decode(errors="replace")))
            return answers

    with FakeModelServer([]) as fake:
        answers = asyncio.run(attack(fake))
        reached = len(fake.requests)
    assert [status for status, _ in answers] == [400] * 9, answers
    assert reached == 0
    assert "'web_search'" in answers[0][1] and "'web_search_20250305'" in answers[5][1]
    assert "mcp_servers" in answers[7][1]
