"""`rebench doctor`: what this machine can run, asked before a long campaign rather than learnt an hour in.

    diagnose(backend, environments, profile, agents, model, ray_address, db)
      machine.versions          Python, rebench
      engine.docker             engine, cgroups and freezer, root, base image, disk against images to build
      engine.landlock           the scorer's confinement of submitted code
      machine.gpus              nvidia-smi (driver, CUDA), which profiles need more GPUs than here
      machine.ssh / ray / model_keys / database
      needs.environment         per --env: rebench run's preflight, the gateway's key, built or not
      needs.agent               per --agent: its model's SDK and key, its backend
    -> DoctorReport (pydantic): rows with a status and one line that fixes each; `failing` are the
       missing rows a named --backend, --env, --agent or --ray-address needs (the CLI exits 1 on them)

An unknown name (--env, --agent, --backend, --profile) is an input error, raised as one line listing
what exists, as `rebench run` does. Key variables are named, never read beyond being set.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rebench.doctor import engine as engine_checks
from rebench.doctor import machine, needs
from rebench.doctor.report import Check, DoctorReport, Status
from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError

__all__ = ["Check", "DoctorReport", "Status", "diagnose"]


def diagnose(*, backend: str | None = None, environments: Sequence[str] = (), profile: str = "tiny",
             agents: Sequence[str] = (), model: str | None = None, ray_address: str | None = None,
             db: Path | None = None) -> DoctorReport:
    """Check this machine for what was named (everything else is reported, never failed)."""
    from rebench.sandbox.factory import FALLBACK_BACKEND, resolve_backend
    from rebench.store.db import default_db_path

    registry = EnvironmentRegistry()
    envs = [registry.get(name) for name in environments]  # unknown names: one line listing what exists
    for env in envs:
        env.profile(profile)
    if backend is not None:
        resolve_backend(backend)
    for agent in agents:
        needs.check_agent_name(agent)
    if model is not None and not agents:
        raise RebenchError(f"--model {model} goes with an --agent (the model is the agent's)")

    sized = envs or [env for env in map(registry.get, registry.names()) if profile in env.metadata.profiles]
    facts = engine_checks.docker(sized, profile)
    chosen = backend or ("docker" if facts.engine is not None else FALLBACK_BACKEND)
    named = [*([f"--backend {backend}"] if backend else []), *(f"--env {env.name}" for env in envs),
             *(f"--agent {agent}" for agent in agents)]
    docker_needed = named if chosen == "docker" else []
    checks = [
        *machine.versions(),
        *(check.needed(*docker_needed) for check in facts.checks),
        engine_checks.landlock(),
        *machine.gpus(registry),
        machine.ssh(),
        machine.ray(ray_address),
        machine.model_keys(),
        machine.database(db if db is not None else default_db_path()).needed(*named),
    ]
    for env in envs:
        checks += needs.environment(env, profile, chosen, facts.engine)
    for agent in agents:
        checks += needs.agent(agent, model, chosen)
    if facts.engine is not None:
        facts.engine.client.close()
    return DoctorReport(backend=chosen, environments=[env.name for env in envs], profile=profile, agents=list(agents),
                        model=model, checks=checks)
