"""Agents: the Agent protocol, the context it acts through, and discovery by entry point.

The names below load their module when first used (PEP 562): a module that needs only a
constant of one agent (the report's `rebench.agents.aide.BEST_NOTE`) does not import the agent
protocol, the model SDK wrappers and the store behind it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rebench.agents.base import Agent, AgentConfig, AgentContext, EnvironmentInfo, LimitExceeded, ModelUsage
    from rebench.agents.registry import available_agents, load_agent

_WHERE = {
    **dict.fromkeys(["Agent", "AgentConfig", "AgentContext", "EnvironmentInfo", "LimitExceeded", "ModelUsage"],
                    "rebench.agents.base"),
    **dict.fromkeys(["available_agents", "load_agent"], "rebench.agents.registry"),
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "Agent",
    "AgentConfig",
    "AgentContext",
    "EnvironmentInfo",
    "LimitExceeded",
    "ModelUsage",
    "available_agents",
    "load_agent",
]
