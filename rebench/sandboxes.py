"""An attempt's sandbox for an environment: what the built-in backends need of the environment,
resolved here, above both the sandbox layer and the environments and images layers.

The sandbox layer knows nothing of environments (it is below them): a backend reads the image
(docker) or the environment's built python (local) from its SandboxSpec, and this module fills
those in from the environment's build before the backend creates the sandbox. Other backends
(entry points of group `rebench.sandboxes`) get the environment itself and a spec with whatever of
both is built (one that wraps a built-in backend hands that spec on).
"""

from __future__ import annotations

import contextlib

from rebench.environments.registry import Environment
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.sandbox.factory import docker_available, load_backend


def resolve_spec(backend: str, spec: SandboxSpec, env: Environment) -> SandboxSpec:
    """`spec` with what `backend` needs of `env` filled in; building nothing (a missing build is a
    one-line RebenchError naming the command that builds it). Another backend may hand the spec on
    to a built-in one, so it gets whatever of both is built already, and no error for the rest."""
    if backend == "local":
        if spec.keep_alive:  # a human attempt on the local backend is refused by the backend, built or not
            return spec
        return _with_python(spec, env)
    if backend == "docker":
        return _with_image(spec, env)
    with contextlib.suppress(Exception):
        spec = _with_python(spec, env)
    if spec.image is None and docker_available():
        with contextlib.suppress(Exception):
            spec = _with_image(spec, env)
    return spec


def _with_python(spec: SandboxSpec, env: Environment) -> SandboxSpec:
    if spec.python is not None:
        return spec
    from rebench.environments.build import local_python

    return spec.model_copy(update={"python": str(local_python(env, spec.profile, build=False))})


def _with_image(spec: SandboxSpec, env: Environment) -> SandboxSpec:
    if spec.image is not None:
        return spec
    from rebench.images.build import current_environment_image
    from rebench.sandbox.docker.engine import DockerEngine

    return spec.model_copy(update={"image": current_environment_image(env, spec.profile, DockerEngine.connect())})


def create_sandbox(backend: str, spec: SandboxSpec, env: Environment) -> Sandbox:
    """The runner's sandbox factory: build (not start) the attempt's sandbox on `backend`."""
    return load_backend(backend).create(resolve_spec(backend, spec, env), env)
