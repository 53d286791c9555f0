"""What every LLM agent of rebench shares: the model knobs, reading them from `--agent-arg`,
and one model caller per attempt (provider client, retries paused off the clock, tokens and
cost recorded through the context).

The modular and aide agents both build on this, so a provider, a price table, a retry
policy or a key variable behaves the same whichever scaffold runs it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from rebench.agents.base import AgentConfig, AgentContext
from rebench.errors import RebenchError
from rebench.models import (
    DEFAULT_CONTEXT_WINDOW,
    ModelCaller,
    ModelPrice,
    RetryPolicy,
    check_model_available,
    create_model_client,
    model_price,
    model_spec,
)


class ModelSettings(BaseModel, extra="forbid"):
    """Knobs about the model and its provider, the same for every LLM agent."""

    max_output_tokens: int = 8_192
    context_window: int | None = None
    """Tokens per request; defaults to the price table's entry for the model."""
    request_timeout_s: float = 600.0
    max_retries: int = 8
    retry_base_s: float = 2.0
    retry_max_wait_s: float = 120.0
    prices: str | None = None
    """A price table that overrides the bundled one (also $REBENCH_PRICES)."""
    api_key_env: str | None = None
    """The environment variable holding the key (openai-compatible servers)."""


S = TypeVar("S", bound=BaseModel)


def parse_agent_settings(model: type[S], args: dict[str, str], agent: str) -> S:
    """Agent args to settings; an unknown key or a bad value is a one-line error naming the agent."""
    allowed = sorted(model.model_fields)
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise RebenchError(f"unknown --agent-arg {unknown[0]!r} for {agent}; allowed: {', '.join(allowed)}")
    try:
        return model.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "?"
        raise RebenchError(f"invalid --agent-arg {key}={args.get(key)!r} for {agent}: {first['msg']}") from exc


def check_model(config: AgentConfig) -> None:
    """Fail before any sandbox starts: the model name must parse and its key and SDK be there."""
    model_spec(config)
    check_model_available(config)


class OpenModel:
    """The attempt's model: the caller every request goes through, its price and its window."""

    def __init__(self, caller: ModelCaller, price: ModelPrice, window: int) -> None:
        self.caller = caller
        self.price = price
        self.window = window


@asynccontextmanager
async def open_model(config: AgentConfig, settings: ModelSettings, ctx: AgentContext) -> AsyncIterator[OpenModel]:
    """A provider client for the attempt, closed when the block ends, behind a ModelCaller
    that pauses the clock while it waits out provider retries and records every call."""
    spec = model_spec(config)
    price = model_price(config, spec)
    window = settings.context_window or price.context_window or DEFAULT_CONTEXT_WINDOW
    client = create_model_client(config, request_timeout_s=settings.request_timeout_s)
    policy = RetryPolicy(
        max_retries=settings.max_retries,
        base_delay_s=settings.retry_base_s,
        max_delay_s=settings.retry_max_wait_s,
    )
    try:
        yield OpenModel(ModelCaller(client, ctx, price, policy), price, window)
    finally:
        await client.close()
