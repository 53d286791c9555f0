"""OpenAI Chat Completions through the official `openai` SDK.

Also serves any OpenAI-compatible server (vLLM, a local server, a gateway)
through `base_url`. The SDK's own retries are off: rebench retries itself so
that the waits pause the attempt clock.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from rebench.models.errors import connection_error, status_error
from rebench.models.messages import Completion, Message, ToolCall, ToolSpec
from rebench.models.names import ModelSpec

NO_KEY_PLACEHOLDER = "no-key"
"""The SDK insists on a key string; a local OpenAI-compatible server ignores it."""


def to_openai_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role == "tool":
            wire.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        elif message.role == "assistant":
            # Chat Completions wants null content beside tool calls, a string otherwise.
            content = message.content or (None if message.tool_calls else "")
            entry: dict[str, Any] = {"role": "assistant", "content": content}
            if message.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                    for call in message.tool_calls
                ]
            wire.append(entry)
        else:
            wire.append({"role": "user", "content": message.content})
    return wire


def to_openai_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def _parse_arguments(raw: str | None) -> tuple[dict[str, Any], str | None]:
    if not raw:
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg}): {raw[:200]}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got: {raw[:200]}"
    return value, None


class OpenAIChatClient:
    """One model behind the Chat Completions API."""

    def __init__(self, spec: ModelSpec, api_key: str | None, *, request_timeout_s: float = 600.0) -> None:
        self.model = spec.full_name
        self._spec = spec
        self._key = api_key
        self._client = openai.AsyncOpenAI(
            api_key=api_key or NO_KEY_PLACEHOLDER,
            base_url=spec.base_url,
            max_retries=0,
            timeout=request_timeout_s,
        )

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], *, max_output_tokens: int
    ) -> Completion:
        request: dict[str, Any] = {
            "model": self._spec.name,
            "messages": to_openai_messages(system, messages),
        }
        if tools:
            request["tools"] = to_openai_tools(tools)
        # Official OpenAI reasoning models accept only max_completion_tokens; most
        # compatible servers (vLLM and others) still expect max_tokens.
        limit_field = "max_completion_tokens" if self._spec.provider == "openai" else "max_tokens"
        request[limit_field] = max_output_tokens
        try:
            response = await self._client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise status_error(
                self._spec.provider,
                exc.status_code,
                exc.response.text,
                exc.response.headers,
                self._key,
                key_variable=self._spec.key_variable,
            ) from None
        except openai.APIConnectionError as exc:
            raise connection_error(self._spec.provider, exc, self._key) from None
        return self._completion(response)

    def _completion(self, response: Any) -> Completion:
        choice = response.choices[0] if response.choices else None
        text = ""
        calls: list[ToolCall] = []
        if choice is not None:
            text = choice.message.content or ""
            for index, call in enumerate(choice.message.tool_calls or []):
                function = getattr(call, "function", None)
                if function is None:
                    continue
                arguments, error = _parse_arguments(function.arguments)
                calls.append(
                    ToolCall(
                        id=call.id or f"call_{index}",
                        name=function.name,
                        arguments=arguments,
                        parse_error=error,
                    )
                )
        usage = response.usage
        cached = 0
        if usage is not None and usage.prompt_tokens_details is not None:
            cached = usage.prompt_tokens_details.cached_tokens or 0
        return Completion(
            text=text,
            tool_calls=calls,
            stop_reason=choice.finish_reason if choice is not None else None,
            input_tokens=usage.prompt_tokens if usage is not None else 0,
            output_tokens=usage.completion_tokens if usage is not None else 0,
            cached_tokens=cached,
            response_model=response.model,
        )

    async def close(self) -> None:
        await self._client.close()
