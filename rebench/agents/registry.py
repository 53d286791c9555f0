"""Finding agents by name.

Built-in agents live in the top-level `agents/` package, one folder each, whose
`agent.py` defines `create_agent(config) -> Agent`. Third-party packages add
agents through the `rebench.agents` entry-point group, so nobody edits rebench to
add one (and there is no global mutable registry).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import cast

from rebench.agents.base import Agent, AgentConfig
from rebench.errors import RebenchError

ENTRY_POINT_GROUP = "rebench.agents"

AgentFactory = Callable[[AgentConfig], Agent]


def _builtin_names() -> list[str]:
    try:
        package = importlib.import_module("agents")
    except ImportError:
        return []
    return sorted(
        info.name
        for info in pkgutil.iter_modules(package.__path__)
        if info.ispkg and not info.name.startswith("_")
    )


def available_agents() -> dict[str, str]:
    """Agent name -> where it comes from (built-in module or entry point)."""
    found = {name: f"agents.{name}.agent:create_agent" for name in _builtin_names()}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def load_agent(config: AgentConfig) -> Agent:
    """Build the agent named in `config`; an unknown name is a one-line error."""
    if config.name in _builtin_names():
        module = importlib.import_module(f"agents.{config.name}.agent")
        factory = cast(AgentFactory, module.create_agent)
        return factory(config)
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == config.name]
    if not matches:
        allowed = ", ".join(sorted(available_agents())) or "(none installed)"
        raise RebenchError(f"unknown agent {config.name!r}; allowed: {allowed}")
    return cast(AgentFactory, matches[0].load())(config)
