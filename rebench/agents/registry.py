"""Finding agents by name.

Built-in agents live in subpackages of `rebench.agents` (`rebench/agents/NAME/`),
one folder each, whose `agent.py` defines `create_agent(config) -> Agent`. Third-party packages add
agents through the `rebench.agents` entry-point group, so nobody edits rebench to
add one (and there is no global mutable registry).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import cast

from rebench.agents.base import Agent, AgentConfig
from rebench.errors import RebenchError
from rebench.plugins import describe, entry_points_by_name

ENTRY_POINT_GROUP = "rebench.agents"

AgentFactory = Callable[[AgentConfig], Agent]


def _builtin_names() -> list[str]:
    package = importlib.import_module("rebench.agents")
    return sorted(
        info.name
        for info in pkgutil.iter_modules(package.__path__)
        if info.ispkg and not info.name.startswith("_")
    )


def _plugins() -> dict[str, EntryPoint]:
    """Plugin entry points by agent name.

    A plugin may not take a built-in agent's name (or another plugin's): one of
    the two would be silently ignored, so the run would not use the agent the
    user installed or the one they asked for. That is a one-line error naming both.
    """
    builtins = set(_builtin_names())
    plugins = entry_points_by_name(ENTRY_POINT_GROUP, "agent plugin")
    for name, ep in plugins.items():
        if name in builtins:
            raise RebenchError(
                f"agent plugin {name!r} ({describe(ep)}) has the name of the built-in agent {name!r} "
                f"({_builtin_target(name)}); rename the plugin's entry point in group {ENTRY_POINT_GROUP!r}"
            )
    return plugins


def _builtin_target(name: str) -> str:
    return f"rebench.agents.{name}.agent:create_agent"


def _declared() -> dict[str, Path]:
    """Installed agents' declaration files (rebench.agents.declared) by name; a name taken twice is an error."""
    from rebench.agents.declared import declared_agents

    declared = declared_agents()
    taken = set(_builtin_names()) | set(_plugins())
    for name, path in declared.items():
        if name in taken:
            raise RebenchError(f"agent declaration {path} has the name of another agent {name!r}; rename the file")
    return declared


def available_agents() -> dict[str, str]:
    """Agent name -> where it comes from (built-in module, entry point or declaration file)."""
    found = {name: _builtin_target(name) for name in _builtin_names()}
    found.update((name, ep.value) for name, ep in _plugins().items())
    found.update((name, str(path)) for name, path in _declared().items())
    return found


def load_agent(config: AgentConfig) -> Agent:
    """Build the agent named in `config`; an unknown name, or a plugin clashing with a built-in, is a one-line error."""
    plugins = _plugins()
    if config.name in _builtin_names():
        module = importlib.import_module(f"rebench.agents.{config.name}.agent")
        agent = cast(AgentFactory, module.create_agent)(config)
    elif config.name not in plugins and config.name in (declared := _declared()):
        from rebench.agents.declared import load_declaration
        from rebench.agents.installed import InstalledAgent

        agent = InstalledAgent(load_declaration(declared[config.name]), config)
    elif config.name not in plugins:
        allowed = ", ".join(sorted(available_agents())) or "(none installed)"
        raise RebenchError(f"unknown agent {config.name!r}; allowed: {allowed}")
    else:
        agent = cast(AgentFactory, plugins[config.name].load())(config)
    _check_arguments(agent, config)
    return agent


def _check_arguments(agent: Agent, config: AgentConfig) -> None:
    """An agent that declares its `--agent-arg` keys (`arguments`) refuses any other: a typo such as
    `repeat=5` must not be dropped without a word."""
    declared = getattr(agent, "arguments", None)
    if declared is None:
        return
    unknown = sorted(set(config.args) - set(declared))
    if unknown:
        allowed = ", ".join(sorted(declared)) or "none"
        raise RebenchError(f"unknown --agent-arg {unknown[0]!r} for {config.name}; allowed: {allowed}")


def agent_problems(config: AgentConfig, backend: str) -> list[RebenchError]:
    """What stops the agent of `config` from running on `backend`, found before any sandbox starts
    (`rebench run` refuses the first, `rebench doctor` lists them all): a bad name or script; a model
    without its key, SDK or price; an installed agent on a backend it cannot run in. Empty: none."""
    from rebench.models import check_model_available

    try:
        agent = load_agent(config)
    except RebenchError as exc:
        return [exc]
    own = getattr(agent, "check", None)
    problems = []
    for check in (lambda: check_model_available(config), lambda: own(backend) if own is not None else None):
        try:
            check()
        except RebenchError as exc:
            problems.append(exc)
    return problems
