"""One provider's format to an upstream of the other (translated, or refused with a 400 naming the field),
the local model behind all three APIs, and streams the gateway itself ends (it closes; the client
leaves). Real `openai` and `anthropic` SDKs as clients, tests/fake_model_server.py as the upstream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from rebench.store.db import Store

from .fake_model_server import FakeModelServer
from .test_gateway import rows
from .test_gateway_streams import CALL, HANG, SCHEMA, TOOL, USER, ant, chat_stream, oai, serving


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "gw.db")


@pytest.fixture(autouse=True)
def provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-harness")


HISTORY = [{"role": "user", "content": "list files"},
           {"role": "assistant", "content": [{"type": "text", "text": "sure"},
                                             {"type": "tool_use", "id": "toolu_1", "name": "bash",
                                              "input": {"command": "ls"}}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                                        {"type": "text", "text": "and now?"}]}]


def test_anthropic_messages_reach_an_openai_compatible_upstream_translated(store: Store) -> None:
    async def go(fake: FakeModelServer) -> list[Any]:
        async with serving(store, "openai-compatible/served", fake) as (server, url):
            client = ant(url, server.meters["agent"].token)
            tools = [{"name": "bash", "description": "run a command", "input_schema": SCHEMA}]
            whole = await client.messages.create(model="tiny-1", max_tokens=50, system="be brief", messages=HISTORY,
                                                 tools=tools)  # type: ignore[arg-type]
            # Claude Code asks for thinking: a hint the upstream cannot follow, left out as `reasoning` is
            async with client.messages.stream(model="tiny-1", max_tokens=50, messages=USER,
                                              thinking={"type": "enabled", "budget_tokens": 20}) as stream:
                texts = [text async for text in stream.text_stream]
                final = await stream.get_final_message()
            with pytest.raises(anthropic.BadRequestError) as refused:
                await client.messages.create(model="tiny-1", max_tokens=50, messages=USER, extra_body={"top_k": 5})
            return [whole, texts, final, refused.value]

    with FakeModelServer([{"tool_calls": [CALL]}, {"text": "x y z"}]) as fake:
        whole, texts, final, refused = asyncio.run(go(fake))
        sent = [r.body for r in fake.requests]
    assert [(b.type, b.input) for b in whole.content] == [("tool_use", {"command": "ls -la"})]
    assert whole.stop_reason == "tool_use"
    assert texts == ["x ", "y ", "z"] and final.content[0].text == "x y z"
    assert "'top_k'" in str(refused) and len(sent) == 2  # refused before the upstream
    assert [m["role"] for m in sent[0]["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert sent[0]["messages"][2]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"command": "ls"}'}
    assert sent[0]["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a.txt"}
    assert sent[0]["tools"] == [TOOL]
    assert "thinking" not in sent[1] and sent[1]["max_tokens"] == 50


def test_openai_requests_reach_an_anthropic_upstream_translated(store: Store) -> None:
    earlier = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "list files"},
               {"role": "assistant", "content": None, "tool_calls": [earlier]},
               {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}]

    async def go(fake: FakeModelServer) -> list[Any]:
        async with serving(store, "anthropic/served", fake) as (server, url):
            sdk = oai(url, server.meters["agent"].token)
            whole = await sdk.chat.completions.create(model="tiny-1", messages=history, tools=[TOOL])  # type: ignore
            texts, _ = await chat_stream(sdk)
            events = [e async for e in await sdk.responses.create(
                model="tiny-1", input="hi", stream=True,
                tools=[{"type": "function", "name": "bash", "parameters": SCHEMA}])]  # type: ignore[list-item]
            with pytest.raises(openai.BadRequestError) as refused:
                await sdk.chat.completions.create(model="tiny-1", messages=USER, logit_bias={"1": 5})  # type: ignore
            return [whole, texts, events, refused.value]

    with FakeModelServer([{"text": "done"}, {"text": "p q"}, {"tool_calls": [CALL]}]) as fake:
        whole, texts, events, refused = asyncio.run(go(fake))
        sent = [r.body for r in fake.requests]
    assert whole.choices[0].message.content == "done" and whole.usage.completion_tokens > 0
    assert texts == ["p ", "q"]
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") \
        == json.dumps(CALL["arguments"])
    assert events[-1].response.output[0].name == "bash" and events[-1].response.usage.output_tokens > 0
    assert "'logit_bias'" in str(refused) and len(sent) == 3
    assert sent[0]["system"] == [{"type": "text", "text": "be brief"}]
    assert [m["role"] for m in sent[0]["messages"]] == ["user", "assistant", "user"]
    assert sent[0]["messages"][1]["content"] == [{"type": "tool_use", "id": "call_1", "name": "bash",
                                                  "input": {"command": "ls"}}]
    assert sent[0]["messages"][2]["content"][0]["type"] == "tool_result"
    assert sent[0]["tools"][0]["input_schema"] == SCHEMA


def test_the_local_model_answers_all_three_apis_streamed_or_not(store: Store) -> None:
    async def go() -> dict[str, Any]:
        async with serving(store, "local/tiny") as (server, url):
            sdk, client = oai(url, server.meters["agent"].token), ant(url, server.meters["agent"].token)
            seen: dict[str, Any] = {}
            seen["chat"] = (await sdk.chat.completions.create(model="tiny-1", messages=USER)).choices[0].message.content
            seen["chat_stream"] = "".join((await chat_stream(sdk))[0])
            seen["responses"] = (await sdk.responses.create(model="tiny-1", input="hi")).output_text
            events = [e async for e in await sdk.responses.create(model="tiny-1", input="hi", stream=True)]
            seen["responses_stream"] = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            message = await client.messages.create(model="tiny-1", max_tokens=64, messages=USER)
            seen["messages"] = message.content[0].text  # type: ignore[union-attr]
            async with client.messages.stream(model="tiny-1", max_tokens=64, messages=USER) as stream:
                seen["messages_stream"] = "".join([text async for text in stream.text_stream])
            seen["count"] = (await client.messages.count_tokens(model="tiny-1", messages=[
                {"role": "user", "content": "three words here"}])).input_tokens
            return seen

    seen = asyncio.run(go())
    count = seen.pop("count")
    assert len(set(seen.values())) == 1 and len(seen["chat"].split()) == 64  # one request, one answer, any API
    assert count == 3  # the local model's own count
    assert [r.endpoint for r in rows(store)][-1] == "/v1/messages/count_tokens"
    assert all(r.status == 200 for r in rows(store))


def test_streams_the_gateway_ends_itself_close_cleanly_and_free_their_slot(store: Store) -> None:
    """The gateway closing (the attempt ended) ends a stream with an error event; a client leaving mid-stream
    frees its slot at once (concurrency 1: the next request is served)."""
    slow = {"text": " ".join(["w"] * 40), "chunk_delay_s": 0.1}

    async def go(fake: FakeModelServer) -> tuple[str, str]:
        async with serving(store, "openai-compatible/served", fake, concurrency=1) as (server, url):
            sdk = oai(url, server.meters["agent"].token)
            stream = await sdk.chat.completions.create(model="tiny-1", messages=USER, stream=True)
            async for _ in stream:
                break
            await stream.close()  # the client leaves
            second = await asyncio.wait_for(sdk.chat.completions.create(model="tiny-1", messages=USER), HANG)
            stream = await sdk.chat.completions.create(model="tiny-1", messages=USER, stream=True)
            closing = asyncio.ensure_future(server.close())
            with pytest.raises(openai.APIError) as ended:
                async for _ in stream:
                    pass
            await closing
            return str(second.choices[0].message.content), str(ended.value)

    with FakeModelServer([slow, {"text": "served"}, slow]) as fake:
        second, ended = asyncio.run(go(fake))
    assert second == "served" and "the attempt ended" in ended
    assert [r.status for r in rows(store)] == [499, 200, 503]
