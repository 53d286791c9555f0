"""Anthropic Messages through the official `anthropic` SDK.

Tool results travel as `tool_result` blocks in user turns, so consecutive
neutral tool and user messages are merged into one user turn. The prompt is
marked for caching at the system prompt and the newest turn, which makes the
long, growing agent conversation cheap to resend.
"""

from __future__ import annotations

from typing import Any

import anthropic

from rebench.models.errors import connection_error, status_error
from rebench.models.messages import Completion, Message, ToolCall, ToolSpec
from rebench.models.names import ModelSpec

_CACHE = {"type": "ephemeral"}


def to_anthropic_messages(messages: list[Message], *, cache_last: bool = True) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []

    def user_blocks() -> list[dict[str, Any]]:
        if not wire or wire[-1]["role"] != "user":
            wire.append({"role": "user", "content": []})
        blocks: list[dict[str, Any]] = wire[-1]["content"]
        return blocks

    for message in messages:
        if message.role == "tool":
            user_blocks().append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.content or "(empty)",
                }
            )
        elif message.role == "user":
            user_blocks().append({"type": "text", "text": message.content or "(empty)"})
        else:
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                for call in message.tool_calls
            )
            wire.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(no reply)"}]})
    if cache_last and wire and wire[-1]["content"]:
        wire[-1]["content"][-1] = {**wire[-1]["content"][-1], "cache_control": _CACHE}
    return wire


def to_anthropic_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


class AnthropicClient:
    """One model behind the Messages API."""

    def __init__(self, spec: ModelSpec, api_key: str | None, *, request_timeout_s: float = 600.0) -> None:
        self.model = spec.full_name
        self._spec = spec
        self._key = api_key
        self._timeout = request_timeout_s
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=spec.base_url, max_retries=0, timeout=request_timeout_s
        )

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], *, max_output_tokens: int
    ) -> Completion:
        request: dict[str, Any] = {
            "model": self._spec.name,
            "max_tokens": max_output_tokens,
            "messages": to_anthropic_messages(messages),
            "timeout": self._timeout,
        }
        if system:
            request["system"] = [{"type": "text", "text": system, "cache_control": _CACHE}]
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        try:
            response = await self._client.messages.create(**request)
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
