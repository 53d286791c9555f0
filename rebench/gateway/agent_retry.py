"""Provider retries for an installed agent's gateway, off the agent's clock.

The host-side agents retry a provider's rate limits, overloads and 5xx themselves with the clock paused
(rebench.models): the paper's rule is that generation time counts and retry waits do not. An agent
inside the sandbox would retry on its own clock, so its gateway retries first: a request the provider
refuses with one of RETRIED is sent again after an exponential wait, paused (reason `provider-retry`),
and only the last refusal reaches the agent. A stream is retried only before its first event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from rebench.gateway.upstreams import Reply, Upstream, UpstreamError, UpstreamStream

RETRIED = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
PAUSE_REASON = "provider-retry"
T = TypeVar("T")


class RetryingUpstream:
    """`inner`, with its refusals in RETRIED retried under `pause(PAUSE_REASON)`."""

    def __init__(self, inner: Upstream, pause: Callable[[str], AbstractContextManager[Any]], *,
                 retries: int = 6, base_s: float = 2.0, max_s: float = 60.0) -> None:
        self.inner = inner
        self.formats = inner.formats
        self.pause = pause
        self.retries = retries
        self.base_s = base_s
        self.max_s = max_s
        self.retried = 0
        """Requests sent again so far (all of the gateway's)."""

    def input_bound(self, fmt: str, body: dict[str, Any]) -> int:
        return self.inner.input_bound(fmt, body)

    async def count_tokens(self, body: dict[str, Any]) -> int:
        return await self.inner.count_tokens(body)

    async def close(self) -> None:
        await self.inner.close()

    async def call(self, fmt: str, body: dict[str, Any]) -> Reply:
        return await self._again(lambda: self.inner.call(fmt, body))

    async def stream(self, fmt: str, body: dict[str, Any]) -> UpstreamStream:
        return await self._again(lambda: self.inner.stream(fmt, body))

    async def _again(self, send: Callable[[], Awaitable[T]]) -> T:
        for attempt in range(self.retries + 1):
            try:
                return await send()
            except UpstreamError as exc:
                if exc.status not in RETRIED or attempt == self.retries:
                    raise
            self.retried += 1
            with self.pause(PAUSE_REASON):
                await asyncio.sleep(min(self.max_s, self.base_s * 2**attempt))
        raise AssertionError("unreachable")
