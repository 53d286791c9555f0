"""Agents: the Agent protocol, the context it acts through, and discovery by entry point.

The names below load their module when first used (lazy_loader): a module that needs only a
constant of one agent (the report's `rebench.agents.aide.BEST_NOTE`) does not import the agent
protocol, the model SDK wrappers and the store behind it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from rebench.agents.base import Agent, AgentConfig, AgentContext, EnvironmentInfo, LimitExceeded, ModelUsage
    from rebench.agents.registry import available_agents, load_agent

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "base": ["Agent", "AgentConfig", "AgentContext", "EnvironmentInfo", "LimitExceeded", "ModelUsage"],
    "registry": ["available_agents", "load_agent"],
})
