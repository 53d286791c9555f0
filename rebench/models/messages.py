"""A provider-neutral conversation, translated to each SDK's wire format.

Agents build conversations once in these types; each provider module turns
them into Chat Completions or Messages requests, so an agent works the same
on both without knowing either.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ToolSpec(BaseModel):
    """A tool the model may call; `parameters` is a JSON Schema object."""

    name: str
    description: str
    parameters: dict[str, Any]


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = None
    """Set when the model's arguments were not a JSON object; the agent reports it back."""


class Message(BaseModel):
    """One turn: user text, assistant text plus tool calls, or one tool result.

    Frozen: a conversation changes by appending or replacing messages, never by editing one, so
    the providers can keep each message's wire form between calls (rebench.models.message_memo)."""

    model_config = ConfigDict(frozen=True)

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None


class Completion(BaseModel):
    """One model reply with its usage. `input_tokens` counts every prompt token,
    `cached_tokens` the part read from the provider's cache."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    response_model: str | None = None


class ProviderError(Exception):
    """A failed model call. `retryable` errors (rate limits, overload, 5xx,
    connection trouble) are retried with backoff; others end the attempt."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
        context_overflow: bool = False,
        key_variable: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s
        self.context_overflow = context_overflow
        self.key_variable = key_variable
        """The environment variable the rejected key came from (401/403 only)."""

    @property
    def error_source(self) -> str:
        """Who is to blame when this ends an attempt: a rejected key or permission is the
        user's setup; a conversation too long for the model is the agent's (it is the
        agent's job to keep it inside the window); anything else the provider did is
        infrastructure, not the agent."""
        if self.status in (401, 403):
            return "user"
        return "agent" if self.context_overflow else "infrastructure"

    @property
    def stops_campaign(self) -> bool:
        """A rejected key fails every attempt alike: the campaign stops instead of starting more."""
        return self.status in (401, 403)


class ContextWindowExceeded(ProviderError):
    """The conversation no longer fits the model's context window and trimming cannot make it
    fit. The agent's failure (its conversation, its trimming), not the provider's: the attempt
    ends as an agent error, is counted and keeps its cost; it is not re-run."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False, context_overflow=True)


class ModelClient(Protocol):
    """One model behind one SDK. Implementations make a single request (no SDK
    retries): retrying is the caller's job, so the waits can pause the clock."""

    model: str
    """The full `provider/model` name."""

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], *, max_output_tokens: int
    ) -> Completion: ...

    async def close(self) -> None: ...


CONTEXT_OVERFLOW_HINTS = (
    "context length",
    "context_length",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "context window",
)


def looks_like_context_overflow(text: str) -> bool:
    lowered = text.lower()
    return any(hint in lowered for hint in CONTEXT_OVERFLOW_HINTS)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `retry-after` header (seconds form only; dates are ignored)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
