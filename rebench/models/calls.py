"""Making model calls the honest way: retried, priced, timed and recorded.

RE-Bench's clock rule: generation time counts against the budget, waits
caused by rate limits and provider errors do not. So every backoff sleep runs
inside `ctx.pause("provider-retry")`, while the requests themselves (failed
ones included) count as model wait.
"""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pydantic import BaseModel

from rebench.clock import PauseInterval
from rebench.models.messages import Completion, Message, ModelClient, ProviderError, ToolSpec
from rebench.models.prices import ModelPrice
from rebench.models.requests import RequestLog
from rebench.models.usage import ModelUsage

RETRY_PAUSE_REASON = "provider-retry"


class CallRecorder(Protocol):
    """The part of an agent's context (`rebench.agents.base.AgentContext`) that a model caller
    uses: recording calls and events, and pausing the clock while it backs off."""

    def record_model_call(self, usage: ModelUsage, **event: Any) -> None: ...

    def log_event(self, kind: str, **data: Any) -> None: ...

    def pause(self, reason: str) -> AbstractContextManager[PauseInterval]: ...


class RetryPolicy(BaseModel):
    """Exponential backoff; a provider's retry-after wins but is capped at `max_delay_s`."""

    max_retries: int = 8
    base_delay_s: float = 2.0
    max_delay_s: float = 120.0

    def delay(self, retry: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.max_delay_s)
        backoff = self.base_delay_s * (2**retry)
        return min(backoff * random.uniform(1.0, 1.25), self.max_delay_s)


class ModelCaller:
    """One model as an agent sees it: `complete` returns a reply or raises
    ProviderError once retries are spent; every success is recorded through
    `ctx.record_model_call`, which may raise LimitExceeded."""

    def __init__(
        self, client: ModelClient, ctx: CallRecorder, price: ModelPrice, policy: RetryPolicy | None = None
    ) -> None:
        self.client = client
        self.ctx = ctx
        self.price = price
        self.policy = policy or RetryPolicy()
        self.tokens_used = 0
        self.cost_used_usd = 0.0
        self.requests = RequestLog()
        """What each recorded call sent, as a difference from the call before (rebench.models.requests)."""

    async def complete(
        self,
        system: str,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        max_output_tokens: int,
        **event: Any,
    ) -> Completion:
        retries = 0
        retry_wait_s = 0.0
        request_s = 0.0
        while True:
            started = time.monotonic()
            try:
                completion = await self.client.complete(system, messages, tools, max_output_tokens=max_output_tokens)
            except ProviderError as err:
                request_s += time.monotonic() - started
                if not err.retryable or retries >= self.policy.max_retries:
                    self.ctx.log_event(
                        "model-error",
                        model=self.client.model,
                        error=str(err),
                        status=err.status,
                        retries=retries,
                        context_overflow=err.context_overflow,
                    )
                    raise
                delay = self.policy.delay(retries, err.retry_after_s)
                self.ctx.log_event(
                    "provider-retry",
                    model=self.client.model,
                    status=err.status,
                    error=str(err),
                    retry=retries + 1,
                    delay_s=round(delay, 3),
                )
                with self.ctx.pause(RETRY_PAUSE_REASON):
                    await asyncio.sleep(delay)
                retries += 1
                retry_wait_s += delay
                continue
            request_s += time.monotonic() - started
            break
        usage = ModelUsage(
            model=self.client.model,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            cached_tokens=completion.cached_tokens,
            cost_usd=self.price.cost_usd(
                completion.input_tokens,
                completion.output_tokens,
                completion.cached_tokens,
                completion.cache_write_tokens,
            ),
            wait_s=request_s,
            extra={
                "retries": retries,
                "retry_wait_s": round(retry_wait_s, 3),
                "cache_write_tokens": completion.cache_write_tokens,
                "price_known": self.price.priced,
                "stop_reason": completion.stop_reason,
                "response_model": completion.response_model,
            },
        )
        self.tokens_used += usage.input_tokens + usage.output_tokens
        self.cost_used_usd += usage.cost_usd
        request = self.requests.record(system, messages, tools, max_output_tokens=max_output_tokens)
        self.ctx.record_model_call(usage, **transcript(completion), request=request, **event)
        return completion


TRANSCRIPT_TEXT_LIMIT = 20_000


def transcript(completion: Completion) -> dict[str, Any]:
    """What the model said, for the event row (so an attempt can be replayed)."""
    text = completion.text
    if len(text) > TRANSCRIPT_TEXT_LIMIT:
        half = TRANSCRIPT_TEXT_LIMIT // 2
        text = f"{text[:half]}\n[... {len(text) - TRANSCRIPT_TEXT_LIMIT} characters cut ...]\n{text[-half:]}"
    return {
        "text": text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "parse_error": c.parse_error}
            for c in completion.tool_calls
        ],
    }
