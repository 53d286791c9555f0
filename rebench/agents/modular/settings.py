"""The modular agent's knobs, read from `--agent-arg key=value`.

Defaults follow METR's Modular agent as run for RE-Bench where the paper says
(command timeout 10 s by default, at most 24 min; nudges at 3/4 and 9/10 of
the budget); the rest are rebench's choices. The model's knobs (retries, prices,
key variable, output tokens) are the ones every LLM agent shares (rebench.agents.llm).
"""

from __future__ import annotations

from rebench.agents.llm import ModelSettings, parse_agent_settings


class ModularSettings(ModelSettings):
    bash_timeout_s: float = 10.0
    """Command timeout when the model sets none."""
    bash_timeout_max_s: float = 24 * 60.0
    """The most a model may ask for one command."""
    output_limit_chars: int = 8_000
    """Longer tool outputs are cut to head and tail; the whole output goes to a file."""
    context_fill: float = 0.8
    """Old tool outputs are dropped once the conversation is estimated past this share of the window."""
    chars_per_token: float = 3.0
    """For estimating tokens before a call; deliberately pessimistic."""
    max_idle_turns: int | None = None
    """Replies in a row without a tool call before the agent gives up; None (the default):
    never, it keeps nudging the model until the budget ends, as METR's modular agent does."""


def parse_settings(args: dict[str, str]) -> ModularSettings:
    """Agent args to settings; an unknown key or bad value is a one-line error."""
    return parse_agent_settings(ModularSettings, args, "modular")
