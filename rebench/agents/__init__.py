"""Agents: the Agent protocol, the context it acts through, and discovery by entry point."""

from rebench.agents.base import Agent, AgentConfig, AgentContext, EnvironmentInfo, LimitExceeded, ModelUsage
from rebench.agents.registry import available_agents, load_agent

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
