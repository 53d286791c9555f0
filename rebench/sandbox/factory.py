"""Choosing and creating a sandbox backend for one attempt."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

from rebench.environments.build import local_python
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.paths import cache_dir
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.sandbox.local import LocalSandbox

BACKENDS = ("local", "docker")


def docker_available() -> bool:
    """Whether a Docker engine answers; the docker SDK is imported only when asked."""
    try:
        docker_backend = importlib.import_module("rebench.sandbox.docker")
    except ImportError:
        return False
    return bool(docker_backend.engine_available())


def resolve_backend(requested: str | None) -> tuple[str, str | None]:
    """The backend to use and a warning to show, if any."""
    if requested is not None and requested not in BACKENDS:
        raise RebenchError(f"unknown backend {requested!r}; allowed: {', '.join(BACKENDS)}")
    if requested:
        return requested, None
    if docker_available():
        return "docker", None
    return "local", "no Docker engine answered; using the local backend"


def create_sandbox(backend: str, spec: SandboxSpec, env: Environment) -> Sandbox:
    if backend == "local":
        work = cache_dir() / "work"
        work.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix=f"attempt-{spec.attempt_id}-", dir=work))
        return LocalSandbox(spec, root, python=str(local_python(env, build=False)))
    if backend == "docker":
        docker_backend = importlib.import_module("rebench.sandbox.docker")
        sandbox: Sandbox = docker_backend.create_sandbox(spec, env)
        return sandbox
    raise RebenchError(f"unknown backend {backend!r}; allowed: {', '.join(BACKENDS)}")
