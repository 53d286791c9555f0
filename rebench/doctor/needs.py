"""What a named environment or agent needs of this machine, by the checks `rebench run` makes first
(rebench.preflight, the gateway's key, the agent's own check), and whether it is built here yet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebench.doctor.report import Check, Status
from rebench.environments.registry import Environment
from rebench.errors import RebenchError, SandboxError

if TYPE_CHECKING:
    from rebench.sandbox.docker import DockerEngine


def _built(env: Environment, profile: str, backend: str, engine: DockerEngine | None) -> str:
    """Whether what an attempt starts from is ready, or the command that makes it (a run makes it too)."""
    from rebench.environments.build import built_assets, local_python

    command = f"`rebench envs build {env.name} --profile {profile}{' --backend docker' if backend == 'docker' else ''}`"
    if backend == "docker":
        if engine is None:
            return "image not checked (no engine)"
        from rebench.images.build import current_environment_image

        try:
            return f"image {current_environment_image(env, profile, engine)} built"
        except (RebenchError, SandboxError):
            return f"image not built yet: {command} (a run builds it)"
    try:
        local_python(env, profile, build=False)
    except RebenchError:
        return f"not built yet: {command} (a run builds it)"
    if env.build_script is not None and built_assets(env, profile) is None:
        return f"assets not built yet: {command} (a run builds them)"
    return "virtualenv and assets built"


def environment(env: Environment, profile: str, backend: str, engine: DockerEngine | None) -> list[Check]:
    """One row per thing the profile lacks here (GPUs, a CUDA PyTorch, system packages, operator assets,
    a gateway's provider key), or one ok row saying whether it is built."""
    from rebench import preflight
    from rebench.gateway import check_gateway

    rows = []
    checks = ((f"{profile}: its model gateway cannot start", lambda: check_gateway(env.profile(profile).gateway)),
              (f"{profile} cannot run on {backend}", lambda: preflight.check(env, profile, "doctor", backend=backend)))
    for found, check in checks:
        try:
            check()
        except RebenchError as exc:
            rows.append(Check(area="env", name=env.name, status=Status.MISSING, found=found, fix=str(exc),
                              needed_by=[f"--env {env.name}"]))
    if rows:
        return rows
    return [Check(area="env", name=env.name, status=Status.OK,
                  found=f"{profile} runs on {backend}; {_built(env, profile, backend, engine)}")]


def check_agent_name(name: str) -> str:
    """Where the agent comes from; a one-line error listing the known agents for an unknown name."""
    from rebench.agents.registry import available_agents

    known = available_agents()
    if name not in known:
        raise RebenchError(f"unknown agent {name!r}; allowed: {', '.join(sorted(known))}")
    return known[name]


def agent(name: str, model: str | None, backend: str) -> list[Check]:
    """What `rebench run` checks of an agent before any sandbox starts: its model (name, SDK, key) and
    its backend (an installed agent runs only on docker)."""
    from rebench.agents.base import AgentConfig
    from rebench.agents.registry import agent_problems

    source = check_agent_name(name)
    problems = agent_problems(AgentConfig(name=name, model=model), backend)
    if problems:
        return [_agent_missing(name, backend, str(exc)) for exc in problems]
    found = f"{source}" + (f"; model {model}" if model else "") + f"; runs on {backend}"
    return [Check(area="agent", name=name, status=Status.OK, found=found)]


def _agent_missing(name: str, backend: str, fix: str) -> Check:
    return Check(area="agent", name=name, status=Status.MISSING, found=f"cannot run on {backend}", fix=fix,
                 needed_by=[f"--agent {name}"])
