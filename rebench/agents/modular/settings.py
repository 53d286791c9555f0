"""The modular agent's knobs, read from `--agent-arg key=value`.

Defaults follow METR's Modular agent as run for RE-Bench where the paper says
(command timeout 10 s by default, at most 24 min; nudges at 3/4 and 9/10 of
the budget); the rest are rebench's choices.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from rebench.errors import RebenchError


class ModularSettings(BaseModel, extra="forbid"):
    bash_timeout_s: float = 10.0
    """Command timeout when the model sets none."""
    bash_timeout_max_s: float = 24 * 60.0
    """The most a model may ask for one command."""
    output_limit_chars: int = 8_000
    """Longer tool outputs are cut to head and tail; the whole output goes to a file."""
    max_output_tokens: int = 8_192
    context_window: int | None = None
    """Tokens per request; defaults to the price table's entry for the model."""
    context_fill: float = 0.8
    """Old tool outputs are dropped once the conversation is estimated past this share of the window."""
    chars_per_token: float = 3.0
    """For estimating tokens before a call; deliberately pessimistic."""
    request_timeout_s: float = 600.0
    max_retries: int = 8
    retry_base_s: float = 2.0
    retry_max_wait_s: float = 120.0
    max_idle_turns: int | None = None
    """Replies in a row without a tool call before the agent gives up; None (the default):
    never, it keeps nudging the model until the budget ends, as METR's modular agent does."""
    prices: str | None = None
    """A price table that overrides the bundled one (also $REBENCH_PRICES)."""
    api_key_env: str | None = None
    """The environment variable holding the key (openai-compatible servers)."""


def parse_settings(args: dict[str, str]) -> ModularSettings:
    """Agent args to settings; an unknown key or bad value is a one-line error."""
    allowed = sorted(ModularSettings.model_fields)
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise RebenchError(f"unknown --agent-arg {unknown[0]!r} for modular; allowed: {', '.join(allowed)}")
    try:
        return ModularSettings.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "?"
        raise RebenchError(f"invalid --agent-arg {key}={args.get(key)!r} for modular: {first['msg']}") from exc
