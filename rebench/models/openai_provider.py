"""OpenAI Chat Completions through the official `openai` SDK.

Also serves any OpenAI-compatible server (vLLM, a local server, a gateway)
through `base_url`. The SDK's own retries are off: rebench retries itself so
that the waits pause the attempt clock.

The request body is JSON built here, each message serialized once for the whole
attempt (rebench.models.message_memo), and posted with the SDK's raw `post`: its
`chat.completions.create` would walk the whole conversation through its typed
request transform on every call, on the event loop. Errors, authentication and the
typed `ChatCompletion` reply are still the SDK's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from rebench.models.errors import connection_error, status_error
from rebench.models.message_memo import MessageMemo, json_bytes
from rebench.models.messages import Completion, Message, ToolCall, ToolSpec
from rebench.models.names import ModelSpec

NO_KEY_PLACEHOLDER = "no-key"
"""The SDK insists on a key string; a local OpenAI-compatible server ignores it."""


def to_openai_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
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
    return entry


def to_openai_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    return wire + [to_openai_message(m) for m in messages]


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
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


def _piece(before: Message | None, message: Message) -> bytes:
    """The message's bytes in the `messages` array, with the comma before it."""
    return json_bytes(to_openai_message(message)) if before is None else b"," + json_bytes(to_openai_message(message))


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
        self._messages: MessageMemo[bytes] = MessageMemo(_piece)
        self._fixed: tuple[str, list[ToolSpec], int] | None = None
        self._head = b""
        self._system = b""

    def request_body(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
                     max_output_tokens: int) -> bytes:
        """The request's JSON: only what changed since the last call is serialized, the rest reused."""
        fixed = (system, list(tools), max_output_tokens)
        if fixed != self._fixed:
            head: dict[str, Any] = {"model": self._spec.name}
            if tools:
                head["tools"] = to_openai_tools(tools)
            # Official OpenAI reasoning models accept only max_completion_tokens; most
            # compatible servers (vLLM and others) still expect max_tokens.
            limit_field = "max_completion_tokens" if self._spec.provider == "openai" else "max_tokens"
            head[limit_field] = max_output_tokens
            self._head = json_bytes(head)[:-1] + b',"messages":['
            self._system = json_bytes({"role": "system", "content": system}) if system else b""
            self._fixed = fixed
        system_part = self._system + b"," if self._system and messages else self._system
        # One join: the body is the one copy of the conversation made per call.
        return b"".join([self._head, system_part, *self._messages.values(messages), b"]}"])

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], *, max_output_tokens: int
    ) -> Completion:
        body = self.request_body(system, messages, tools, max_output_tokens=max_output_tokens)
        try:
            response = await self._client.post(
                "/chat/completions", cast_to=ChatCompletion, content=body, options={"security": {"bearer_auth": True}}
            )
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

    def _completion(self, response: ChatCompletion) -> Completion:
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
