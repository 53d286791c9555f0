"""A model call's work in the harness grows with the new messages, not with the conversation (issue 64).

The real provider clients (the openai and anthropic SDKs) talk to the fake model server. Counting
wrappers sit around the SDKs' own request transform and whole-body JSON encoder, and around the
providers' JSON encoder: they pass every call through unchanged and only count, so the test can
tell what ran. What the server received must still be exactly the provider's translation of the
conversation, trimmed messages included.
"""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic._base_client
import openai._base_client
import openai.resources.chat.completions.completions as chat_completions
import pydantic
import pytest

import rebench.models.anthropic_provider as anthropic_provider
import rebench.models.message_memo as message_memo
import rebench.models.openai_provider as openai_provider
from rebench.agents.base import AgentConfig
from rebench.agents.modular.history import TRIMMED_NOTICE, ConversationSize, estimate_tokens, trim_oldest
from rebench.models import Message, ToolCall, ToolSpec, create_model_client
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import model_for, model_server, prices_file, provider_keys  # noqa: F401

BASH = ToolSpec(name="bash", description="run a command", parameters={"type": "object"})
OUTPUT = "x" * 4000


def add_turn(messages: list[Message], turn: int) -> None:
    call = ToolCall(id=f"call_{turn}", name="bash", arguments={"command": f"step {turn}"})
    messages += [Message(role="assistant", content=f"turn {turn}", tool_calls=[call]),
                 Message(role="tool", tool_call_id=call.id, tool_name="bash", content=f"{turn} {OUTPUT}"),
                 Message(role="user", content=f"[time note {turn}]")]


class Counting:
    """Wraps a function: every call passes through; counts calls and the bytes returned."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.calls = 0
        self.size = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        result = self.function(*args, **kwargs)
        self.size += len(result) if isinstance(result, bytes) else 0
        return result


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_a_call_serializes_only_its_new_messages_and_skips_the_sdk_transform(
    provider: str, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transform = chat_completions.async_maybe_transform
    transformed = []
    sdk_dumps = {"openai": Counting(openai._base_client.openapi_dumps),
                 "anthropic": Counting(anthropic._base_client.openapi_dumps)}
    ours = Counting(message_memo.json_bytes)

    async def spied_transform(*args: Any) -> Any:
        transformed.append(args)
        return await transform(*args)

    monkeypatch.setattr(chat_completions, "async_maybe_transform", spied_transform)
    monkeypatch.setattr(openai._base_client, "openapi_dumps", sdk_dumps["openai"])
    monkeypatch.setattr(anthropic._base_client, "openapi_dumps", sdk_dumps["anthropic"])
    monkeypatch.setattr(openai_provider, "json_bytes", ours)
    monkeypatch.setattr(anthropic_provider, "json_bytes", ours)
    client = create_model_client(AgentConfig(name="modular", **model_for(provider, model_server)))  # type: ignore[arg-type]
    messages = [Message(role="user", content="the task")]
    turns = 12
    for turn in range(1, turns):
        add_turn(messages, turn)

    async def calls() -> list[int]:
        serialized = []
        for turn in range(turns, turns + 4):
            if turn == turns + 2:  # the agent trims an old output: one message replaced
                messages[2] = messages[2].model_copy(update={"content": TRIMMED_NOTICE})
            before = ours.size
            await client.complete("system prompt", messages, [BASH], max_output_tokens=64)
            serialized.append(ours.size - before)
            add_turn(messages, turn)
        await client.close()
        return serialized

    serialized = asyncio.run(calls())
    assert not transformed and sdk_dumps["openai"].calls == sdk_dumps["anthropic"].calls == 0
    assert serialized[0] > (turns - 1) * len(OUTPUT), "the first call serializes the whole conversation"
    turn_bytes = 3 * len(OUTPUT)
    assert all(size < turn_bytes for size in serialized[1:]), serialized  # one turn (3 messages) and a notice
    assert len(model_server.requests) == 4
    for sent, body in zip(range(4), (r.body for r in model_server.requests), strict=True):
        shown = messages[: 1 + 3 * (turns - 1 + sent)]
        if sent < 2:
            shown = [*shown[:2], Message(role="tool", tool_call_id="call_1", tool_name="bash",
                                         content=f"1 {OUTPUT}"), *shown[3:]]
        if provider == "anthropic":
            assert body["messages"] == anthropic_provider.to_anthropic_messages(shown)
            assert body["system"][0]["text"] == "system prompt" and body["max_tokens"] == 64
        else:
            assert body["messages"] == openai_provider.to_openai_messages("system prompt", shown)
            assert body["tools"] == openai_provider.to_openai_tools([BASH]) and body["max_tokens"] == 64


def test_trimming_replaces_messages_and_the_remembered_size_follows() -> None:
    """Messages are frozen values: trimming puts a copy in the list and leaves the old one as it was,
    so anything kept per message object (wire JSON, sizes) stays true; the size remembered across
    calls equals a fresh estimate after each trim."""
    messages = [Message(role="user", content="task")]
    for turn in range(1, 30):
        add_turn(messages, turn)
    with pytest.raises(pydantic.ValidationError):
        messages[2].content = "edited"  # type: ignore[misc]
    size = ConversationSize()
    first_output = messages[2]
    assert size.tokens("s", messages, [BASH], 3.0) == estimate_tokens("s", messages, [BASH], 3.0)
    budget = estimate_tokens("s", messages, [BASH], 3.0) // 2
    removed = trim_oldest("s", messages, [BASH], budget_tokens=budget, chars_per_token=3.0, size=size)
    assert removed > 0 and messages[2].content == TRIMMED_NOTICE and first_output.content.endswith(OUTPUT)
    assert size.tokens("s", messages, [BASH], 3.0) == estimate_tokens("s", messages, [BASH], 3.0) <= budget
    add_turn(messages, 30)
    assert size.tokens("s", messages, [BASH], 3.0) == estimate_tokens("s", messages, [BASH], 3.0)
