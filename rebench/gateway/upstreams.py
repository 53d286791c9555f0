"""Where the gateway sends a request: the environment's local model, an OpenAI(-compatible)
endpoint, or Anthropic through rebench.models. Provider keys are read here, in the harness,
from its environment (rebench.models.names) and never reach the sandbox.

Every upstream answers in OpenAI's wire format with its token counts; a failure is an
UpstreamError carrying the HTTP status the gateway passes on.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from rebench.environments.metadata import Gateway
from rebench.gateway.local import LocalModel, load_local_model, request_seed
from rebench.models.errors import redact
from rebench.models.names import parse_model, require_key
from rebench.models.prices import ModelPrice, price_for

MAX_N = 128
"""Samples one request may ask for."""


class UpstreamError(Exception):
    """A request the upstream (or the gateway, checking it) refused or failed: `status` goes to the client."""

    def __init__(self, status: int, message: str, kind: str = "upstream_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class Reply(BaseModel):
    body: dict[str, Any]
    input_tokens: int = 0
    output_tokens: int = 0


class Upstream(Protocol):
    def input_bound(self, endpoint: str, body: dict[str, Any]) -> int:
        """The most input tokens `body` can be charged for (the gateway reserves credit for it)."""
        ...

    async def chat(self, body: dict[str, Any]) -> Reply: ...

    async def completions(self, body: dict[str, Any]) -> Reply: ...

    async def close(self) -> None: ...


def _int_field(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UpstreamError(400, f"{name} must be an integer from {low} to {high}, got {value!r}",
                            "invalid_request_error")
    return value


def json_bytes(body: dict[str, Any]) -> int:
    """A provider's input-token bound: the bytes of the JSON sent (no tokenizer makes more tokens than
    bytes of the text, and the JSON adds quotes and names around each message's text)."""
    return len(json.dumps(body).encode())


def _max_tokens(body: dict[str, Any], cap: int) -> int:
    asked = body.get("max_tokens") if body.get("max_tokens") is not None else body.get("max_completion_tokens")
    if asked is None:
        return cap
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
        raise UpstreamError(400, f"max_tokens must be a positive integer, got {asked!r}", "invalid_request_error")
    return min(asked, cap)


def _temperature(body: dict[str, Any]) -> float:
    value = body.get("temperature", 1.0)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise UpstreamError(400, f"temperature must be a number from 0 to 2, got {value!r}", "invalid_request_error")
    return float(value)


class LocalUpstream:
    """The environment's model, in this process; generate() in a worker thread."""

    def __init__(self, model: LocalModel, model_name: str, max_tokens: int) -> None:
        self.model = model
        self.model_name = model_name
        self.max_tokens = max_tokens

    def input_bound(self, endpoint: str, body: dict[str, Any]) -> int:
        """Exact: the model's own count of the prompt it will be given."""
        return self.model.count_tokens(self._chat_prompt(body) if endpoint == "chat" else self._prompt(body))

    def _chat_prompt(self, body: dict[str, Any]) -> str:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise UpstreamError(400, "messages must be a non-empty list of message objects", "invalid_request_error")
        return self.model.chat_prompt(messages)

    @staticmethod
    def _prompt(body: dict[str, Any]) -> str:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise UpstreamError(400, "prompt must be a string", "invalid_request_error")
        return prompt

    async def _generate(self, prompt: str, body: dict[str, Any]) -> tuple[list[Any], int]:
        n = _int_field(body, "n", 1, 1, MAX_N)
        samples = await asyncio.to_thread(
            self.model.generate, prompt, n=n, temperature=_temperature(body),
            max_tokens=_max_tokens(body, self.max_tokens), seed=request_seed(body))
        return samples, self.model.count_tokens(prompt)

    def _envelope(self, kind: str, choices: list[dict[str, Any]], input_tokens: int,
                  output_tokens: int) -> Reply:
        body = {
            "id": f"{kind}-{time.time_ns():x}", "object": kind, "created": int(time.time()),
            "model": self.model_name, "choices": choices,
            "usage": {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
                      "total_tokens": input_tokens + output_tokens},
        }
        return Reply(body=body, input_tokens=input_tokens, output_tokens=output_tokens)

    async def chat(self, body: dict[str, Any]) -> Reply:
        samples, input_tokens = await self._generate(self._chat_prompt(body), body)
        choices = [{"index": i, "message": {"role": "assistant", "content": s.text},
                    "finish_reason": s.finish_reason, "logprobs": None} for i, s in enumerate(samples)]
        return self._envelope("chat.completion", choices, input_tokens, sum(s.output_tokens for s in samples))

    async def completions(self, body: dict[str, Any]) -> Reply:
        samples, input_tokens = await self._generate(self._prompt(body), body)
        choices = [{"index": i, "text": s.text, "finish_reason": s.finish_reason, "logprobs": None}
                   for i, s in enumerate(samples)]
        return self._envelope("text_completion", choices, input_tokens, sum(s.output_tokens for s in samples))

    async def close(self) -> None:
        return None


class OpenAIWireUpstream:
    """OpenAI's API or any OpenAI-compatible server: the request the gateway built from the allowed
    fields (rebench.gateway.policy) is passed on, the model name swapped for the upstream's; the
    answer and HTTP errors come back as they are.
    Plain HTTP from the standard library, in a worker thread: no SDK is needed to relay JSON."""

    def __init__(self, provider: str, name: str, base_url: str | None, timeout_s: float) -> None:
        spec = parse_model(f"{provider}/{name}", base_url=base_url)
        self.key = require_key(spec)
        self.name = name
        self.provider = provider
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self.timeout_s = timeout_s

    def input_bound(self, endpoint: str, body: dict[str, Any]) -> int:
        return json_bytes(body)

    def _post_blocking(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        request = urllib.request.Request(f"{self.base_url}/{path}", data=json.dumps({**body, "model": self.name})
                                         .encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()
        except (OSError, http.client.HTTPException) as exc:
            raise UpstreamError(502, redact(f"{self.provider} upstream unreachable: {exc or type(exc).__name__}",
                                            self.key)) from None

    async def _post(self, path: str, body: dict[str, Any]) -> Reply:
        status, data = await asyncio.to_thread(self._post_blocking, path, body)
        text = data.decode("utf-8", errors="replace")
        if status != 200:
            detail = redact(" ".join(text.split())[:500], self.key)
            raise UpstreamError(status, f"{self.provider} upstream returned HTTP {status}: {detail}")
        try:
            answer = json.loads(text)
        except ValueError:
            raise UpstreamError(502, f"{self.provider} upstream sent a body that is not JSON") from None
        usage = answer.get("usage") or {}
        return Reply(body=answer, input_tokens=int(usage.get("prompt_tokens") or 0),
                     output_tokens=int(usage.get("completion_tokens") or 0))

    async def chat(self, body: dict[str, Any]) -> Reply:
        return await self._post("chat/completions", body)

    async def completions(self, body: dict[str, Any]) -> Reply:
        return await self._post("completions", body)

    async def close(self) -> None:
        return None


class AnthropicUpstream:
    """Anthropic's Messages API through rebench.models' client; chat completions only, text only."""

    def __init__(self, name: str, timeout_s: float, max_tokens: int, base_url: str | None = None) -> None:
        from rebench.models.anthropic_provider import AnthropicClient

        spec = parse_model(f"anthropic/{name}", base_url=base_url)
        self.client = AnthropicClient(spec, require_key(spec), request_timeout_s=timeout_s)
        self.name = name
        self.max_tokens = max_tokens

    def input_bound(self, endpoint: str, body: dict[str, Any]) -> int:
        return json_bytes(body)

    async def chat(self, body: dict[str, Any]) -> Reply:
        from rebench.models.messages import Message, ProviderError

        system_parts: list[str] = []
        messages: list[Message] = []
        for entry in body.get("messages") or []:
            role, content = entry.get("role"), entry.get("content")
            text = content if isinstance(content, str) else " ".join(
                str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
            if role == "system":
                system_parts.append(text)
            elif role in ("user", "assistant"):
                messages.append(Message(role=role, content=text))
        if not messages:
            raise UpstreamError(400, "messages must hold at least one user message", "invalid_request_error")
        try:
            completion = await self.client.complete("\n\n".join(system_parts), messages, [],
                                                    max_output_tokens=_max_tokens(body, self.max_tokens))
        except ProviderError as exc:
            raise UpstreamError(exc.status or 502, str(exc)) from None
        reply = {"id": f"chat-{time.time_ns():x}", "object": "chat.completion", "created": int(time.time()),
                 "model": completion.response_model or self.name,
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text},
                              "finish_reason": "length" if completion.stop_reason == "max_tokens" else "stop"}],
                 "usage": {"prompt_tokens": completion.input_tokens, "completion_tokens": completion.output_tokens,
                           "total_tokens": completion.input_tokens + completion.output_tokens}}
        return Reply(body=reply, input_tokens=completion.input_tokens, output_tokens=completion.output_tokens)

    async def completions(self, body: dict[str, Any]) -> Reply:
        raise UpstreamError(404, "this gateway's upstream (anthropic) serves /v1/chat/completions only",
                            "invalid_request_error")

    async def close(self) -> None:
        await self.client.close()


def make_upstream(gateway: Gateway, env_root: Path, assets: Path | None) -> Upstream:
    """The upstream a profile's [gateway] names (a local model is loaded here: slow, call in a thread)."""
    provider, _, name = gateway.upstream.partition("/")
    if provider == "local":
        if not gateway.local_model:
            raise UpstreamError(500, f"gateway upstream {gateway.upstream!r} needs local_model")
        return LocalUpstream(load_local_model(env_root, gateway.local_model, assets), gateway.model,
                             gateway.max_tokens)
    if provider == "anthropic":
        return AnthropicUpstream(name, gateway.timeout_s, gateway.max_tokens, gateway.base_url)
    return OpenAIWireUpstream(provider, name, gateway.base_url, gateway.timeout_s)


def upstream_price(gateway: Gateway) -> ModelPrice:
    """Declared notional prices win (a local model has no other); else the price table's entry
    for the upstream (rebench/models/prices.toml, $REBENCH_PRICES); unknown: free."""
    if gateway.price_input_per_mtok is not None or gateway.price_output_per_mtok is not None:
        return ModelPrice(input_per_mtok=gateway.price_input_per_mtok or 0.0,
                          output_per_mtok=gateway.price_output_per_mtok or 0.0)
    return price_for(gateway.upstream)
