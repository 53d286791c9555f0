"""One model call's token and cost counts: what an agent hands `ctx.record_model_call`.

It lives with the model clients (which fill it in) rather than with the agent protocol, so the
model layer needs nothing from the agents above it; `rebench.agents.base` re-exports it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ModelUsage(BaseModel):
    """One model call, as recorded by an LLM agent through `ctx.record_model_call`."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0
    wait_s: float = 0.0
    extra: dict[str, Any] = Field(default_factory=dict)
