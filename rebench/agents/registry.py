"""Agents are found through the `rebench.agents` entry-point group, so a third-party
package can add one without editing rebench (no global mutable registry)."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import cast

from rebench.agents.base import Agent, AgentConfig
from rebench.errors import RebenchError

ENTRY_POINT_GROUP = "rebench.agents"

AgentFactory = Callable[[AgentConfig], Agent]


def available_agents() -> dict[str, str]:
    """Agent name -> import path, from installed entry points."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_agent(config: AgentConfig) -> Agent:
    """Build the agent named in `config`; an unknown name is a one-line error."""
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == config.name]
    if not matches:
        allowed = ", ".join(sorted(available_agents())) or "(none installed)"
        raise RebenchError(f"unknown agent {config.name!r}; allowed: {allowed}")
    factory = cast(AgentFactory, matches[0].load())
    return factory(config)
