"""Providers as upstreams, over httpx2 (the HTTP client the OpenAI and Anthropic SDKs use): OpenAI's API or
any OpenAI-compatible server (chat, completions, Responses) and Anthropic's Messages API.

The body the gateway built from the allowed fields is sent with the upstream's own model name and the
harness's key; answers and HTTP errors come back as they are. A streamed request is read event by event
(httpx2's server-sent-event reader); `timeout_s` bounds each wait on the upstream (connecting, the
answer's head, the next bytes of a stream), so a stalled stream ends instead of hanging.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import httpx2

from rebench.gateway.formats import dumps
from rebench.gateway.replies import usage_of
from rebench.gateway.upstreams import Reply, UpstreamError, json_bytes
from rebench.models.errors import redact
from rebench.models.names import parse_model, require_key

ANTHROPIC_VERSION = "2023-06-01"
_PATHS = {"chat": "chat/completions", "completions": "completions", "responses": "responses",
          "messages": "v1/messages", "count_tokens": "v1/messages/count_tokens"}


class _HttpStream:
    def __init__(self, response: httpx2.Response) -> None:
        self.response = response

    async def events(self) -> AsyncIterator[tuple[str, str]]:
        async for event in httpx2.EventSource(self.response, max_event_size=16 * 1024 * 1024):
            yield event.event, event.data

    async def aclose(self) -> None:
        await self.response.aclose()


class _HttpUpstream:
    """What both providers share: one pooled async client, the key in a header, errors redacted."""

    provider = ""
    formats: frozenset[str] = frozenset()

    def __init__(self, base_url: str, key: str | None, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.name = ""
        self.client = httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s),
                                         limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64))

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def input_bound(self, fmt: str, body: dict[str, Any]) -> int:
        return json_bytes(body)

    async def _post(self, fmt: str, body: dict[str, Any], stream: bool) -> httpx2.Response:
        request = self.client.build_request("POST", f"{self.base_url}/{_PATHS[fmt]}", headers=self._headers(),
                                            content=dumps({**body, "model": self.name}).encode())
        try:
            response = await self.client.send(request, stream=stream)
        except httpx2.TimeoutException:
            raise UpstreamError(504, f"{self.provider} upstream did not answer in time") from None
        except httpx2.HTTPError as exc:
            raise UpstreamError(502, redact(f"{self.provider} upstream unreachable: {exc or type(exc).__name__}",
                                            self.key)) from None
        if response.status_code != 200:
            text = (await response.aread()).decode("utf-8", errors="replace")
            await response.aclose()
            detail = redact(" ".join(text.split())[:500], self.key)
            raise UpstreamError(response.status_code,
                                f"{self.provider} upstream returned HTTP {response.status_code}: {detail}")
        return response

    async def call(self, fmt: str, body: dict[str, Any]) -> Reply:
        response = await self._post(fmt, body, stream=False)
        try:
            answer = json.loads(response.content)
        except ValueError:
            raise UpstreamError(502, f"{self.provider} upstream sent a body that is not JSON") from None
        if not isinstance(answer, dict):
            raise UpstreamError(502, f"{self.provider} upstream sent JSON that is not an object")
        tokens_in, tokens_out = usage_of(fmt, answer)
        return Reply(body=answer, input_tokens=tokens_in, output_tokens=tokens_out)

    async def stream(self, fmt: str, body: dict[str, Any]) -> _HttpStream:
        extra: dict[str, Any] = {"stream": True}
        if fmt == "chat":  # the usage arrives in a last chunk only when asked for
            extra["stream_options"] = {"include_usage": True}
        return _HttpStream(await self._post(fmt, {**body, **extra}, stream=True))

    async def close(self) -> None:
        await self.client.aclose()


class OpenAIWireUpstream(_HttpUpstream):
    """OpenAI's API or an OpenAI-compatible server (`base_url`, e.g. vLLM's)."""

    formats = frozenset({"chat", "completions", "responses"})

    def __init__(self, provider: str, name: str, base_url: str | None, timeout_s: float) -> None:
        spec = parse_model(f"{provider}/{name}", base_url=base_url)
        super().__init__(base_url or "https://api.openai.com/v1", require_key(spec), timeout_s)
        self.provider, self.name = provider, name

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        return headers

    async def count_tokens(self, body: dict[str, Any]) -> int:
        """No tokenizer here: an estimate, four bytes of JSON a token."""
        return max(1, json_bytes(body) // 4)


ANTHROPIC_BETA: ContextVar[str | None] = ContextVar("anthropic_beta", default=None)
"""The request's allowed `anthropic-beta` flags (rebench.gateway.policy.allowed_betas), set by the server
for the request's task (and the tasks it starts) and sent on with it."""


class AnthropicUpstream(_HttpUpstream):
    """Anthropic's Messages API (`base_url` without /v1, as the anthropic SDK takes it)."""

    formats = frozenset({"messages"})
    provider = "anthropic"

    def __init__(self, name: str, timeout_s: float, max_tokens: int, base_url: str | None = None) -> None:
        spec = parse_model(f"anthropic/{name}", base_url=base_url)
        super().__init__(base_url or "https://api.anthropic.com", require_key(spec), timeout_s)
        self.name = name
        self.max_tokens = max_tokens

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json", "x-api-key": self.key or "",
                   "anthropic-version": ANTHROPIC_VERSION}
        betas = ANTHROPIC_BETA.get()
        if betas:
            headers["anthropic-beta"] = betas
        return headers

    async def count_tokens(self, body: dict[str, Any]) -> int:
        response = await self._post("count_tokens", body, stream=False)
        try:
            return int(json.loads(response.content)["input_tokens"])
        except (ValueError, KeyError, TypeError):
            raise UpstreamError(502, "anthropic upstream sent a token count that is not one") from None
