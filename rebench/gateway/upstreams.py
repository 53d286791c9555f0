"""Where the gateway sends a request: the environment's local model (rebench.gateway.upstream_local),
an OpenAI(-compatible) endpoint or Anthropic (rebench.gateway.upstream_http). Provider keys are read
here, in the harness, from its environment (rebench.models.names) and never reach the sandbox.

Each upstream speaks some request formats natively (`formats`: "chat", "completions", "responses",
"messages"); the gateway translates the others through chat (rebench.gateway.translate). A failure
is an UpstreamError carrying the HTTP status the gateway passes on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from pydantic import BaseModel

from rebench.environments.metadata import Gateway
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


class UpstreamStream(Protocol):
    """An opened stream (the upstream said 200): its events, (name, data) as the upstream sent them."""

    def events(self) -> AsyncIterator[tuple[str, str]]: ...

    async def aclose(self) -> None: ...


class Upstream(Protocol):
    formats: frozenset[str]
    """The request formats it speaks natively."""

    def input_bound(self, fmt: str, body: dict[str, Any]) -> int:
        """The most input tokens `body` can be charged for (the gateway reserves credit for it)."""
        ...

    async def call(self, fmt: str, body: dict[str, Any]) -> Reply:
        """The whole answer to `body`, in format `fmt`."""
        ...

    async def stream(self, fmt: str, body: dict[str, Any]) -> UpstreamStream:
        """`body` streamed; UpstreamError before any event when the upstream refuses it."""
        ...

    async def count_tokens(self, body: dict[str, Any]) -> int:
        """Input tokens of an Anthropic Messages request (`/v1/messages/count_tokens`)."""
        ...

    async def close(self) -> None: ...


def int_field(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
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


def max_tokens_of(body: dict[str, Any], cap: int) -> int:
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        asked = body.get(name)
        if asked is not None:
            if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
                raise UpstreamError(400, f"{name} must be a positive integer, got {asked!r}", "invalid_request_error")
            return min(asked, cap)
    return cap


def temperature_of(body: dict[str, Any]) -> float:
    value = body.get("temperature", 1.0)
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise UpstreamError(400, f"temperature must be a number from 0 to 2, got {value!r}", "invalid_request_error")
    return float(value)


def upstream_price(gateway: Gateway) -> ModelPrice:
    """Declared notional prices win (a local model has no other); else the price table's entry
    for the upstream (rebench/models/prices.toml, $REBENCH_PRICES); unknown: free."""
    if gateway.price_input_per_mtok is not None or gateway.price_output_per_mtok is not None:
        return ModelPrice(input_per_mtok=gateway.price_input_per_mtok or 0.0,
                          output_per_mtok=gateway.price_output_per_mtok or 0.0)
    return price_for(gateway.upstream)
