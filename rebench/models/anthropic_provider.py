"""Anthropic Messages through the official `anthropic` SDK.

Tool results travel as `tool_result` blocks in user turns, so consecutive
neutral tool and user messages are merged into one user turn. The prompt is
marked for caching at the system prompt and the newest turn, which makes the
long, growing agent conversation cheap to resend.

As for OpenAI (rebench.models.openai_provider), the request's JSON is built here with each
message serialized once for the attempt, and posted with the SDK's raw `post`, which keeps
the SDK's errors, authentication and typed `Message` reply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic
from anthropic.types import Message as AnthropicMessage

from rebench.models.errors import connection_error, status_error
from rebench.models.message_memo import MessageMemo, json_bytes
from rebench.models.messages import Completion, Message, ToolCall, ToolSpec
from rebench.models.names import ModelSpec

_CACHE = {"type": "ephemeral"}
_USER_TURN = b'{"role":"user","content":['


def _user_block(message: Message) -> dict[str, Any]:
    """A user or tool message as a block of the user turn it joins."""
    if message.role == "tool":
        return {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content or "(empty)"}
    return {"type": "text", "text": message.content or "(empty)"}


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    blocks.extend({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                  for call in message.tool_calls)
    return blocks or [{"type": "text", "text": "(no reply)"}]


def to_anthropic_messages(messages: Sequence[Message], *, cache_last: bool = True) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            wire.append({"role": "assistant", "content": _assistant_blocks(message)})
        elif wire and wire[-1]["role"] == "user":
            wire[-1]["content"].append(_user_block(message))
        else:
            wire.append({"role": "user", "content": [_user_block(message)]})
    if cache_last and wire and wire[-1]["content"]:
        wire[-1]["content"][-1] = {**wire[-1]["content"][-1], "cache_control": _CACHE}
    return wire


def _piece(before: Message | None, message: Message, *, cached: bool = False) -> bytes:
    """The message's bytes in the `messages` array, with what closes or opens a turn before it: a
    user or tool message is a block that opens a user turn unless the message before was one too.
    `cached`: its last block marked for prompt caching (the newest message's)."""
    after_user = before is not None and before.role != "assistant"
    if message.role == "assistant":
        blocks = _assistant_blocks(message)
        if cached:
            blocks[-1] = {**blocks[-1], "cache_control": _CACHE}
        opening = b"" if before is None else (b"]}," if after_user else b",")
        return opening + json_bytes({"role": "assistant", "content": blocks})
    block = _user_block(message)
    if cached:
        block["cache_control"] = _CACHE
    opening = b"," if after_user else (_USER_TURN if before is None else b"," + _USER_TURN)
    return opening + json_bytes(block)


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


class AnthropicClient:
    """One model behind the Messages API."""

    def __init__(self, spec: ModelSpec, api_key: str | None, *, request_timeout_s: float = 600.0) -> None:
        self.model = spec.full_name
        self._spec = spec
        self._key = api_key
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=spec.base_url, max_retries=0, timeout=request_timeout_s
        )
        self._messages: MessageMemo[bytes] = MessageMemo(_piece)
        self._fixed: tuple[str, list[ToolSpec], int] | None = None
        self._head = b""

    def request_body(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
                     max_output_tokens: int) -> bytes:
        """The request's JSON: only what changed since the last call is serialized, the rest reused."""
        fixed = (system, list(tools), max_output_tokens)
        if fixed != self._fixed:
            head: dict[str, Any] = {"model": self._spec.name, "max_tokens": max_output_tokens}
            if system:
                head["system"] = [{"type": "text", "text": system, "cache_control": _CACHE}]
            if tools:
                head["tools"] = to_anthropic_tools(tools)
            self._head = json_bytes(head)[:-1] + b',"messages":['
            self._fixed = fixed
        if not messages:
            return self._head + b"]}"
        pieces = self._messages.values(messages)
        before = messages[-2] if len(messages) > 1 else None
        last = _piece(before, messages[-1], cached=True)
        closing = b"]}" if messages[-1].role != "assistant" else b""
        return b"".join([self._head, *pieces[:-1], last, closing, b"]}"])

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], *, max_output_tokens: int
    ) -> Completion:
        body = self.request_body(system, messages, tools, max_output_tokens=max_output_tokens)
        try:
            response = await self._client.post("/v1/messages", cast_to=AnthropicMessage, content=body)
        except anthropic.APIStatusError as exc:
            raise status_error(
                "anthropic",
                exc.status_code,
                exc.response.text,
                exc.response.headers,
                self._key,
                key_variable=self._spec.key_variable,
            ) from None
        except anthropic.APIConnectionError as exc:
            raise connection_error("anthropic", exc, self._key) from None
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                raw = block.input
                if isinstance(raw, dict):
                    calls.append(ToolCall(id=block.id, name=block.name, arguments=raw))
                else:
                    calls.append(
                        ToolCall(id=block.id, name=block.name, parse_error=f"input must be an object: {raw!r}")
                    )
        usage = response.usage
        cached = usage.cache_read_input_tokens or 0
        written = usage.cache_creation_input_tokens or 0
        return Completion(
            text="\n".join(texts),
            tool_calls=calls,
            stop_reason=response.stop_reason,
            input_tokens=usage.input_tokens + cached + written,
            output_tokens=usage.output_tokens,
            cached_tokens=cached,
            cache_write_tokens=written,
            response_model=response.model,
        )

    async def close(self) -> None:
        await self._client.close()
