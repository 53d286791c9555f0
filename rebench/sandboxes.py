"""An attempt's sandbox for an environment: what the built-in backends need of the environment,
resolved here, above both the sandbox layer and the environments and images layers.

The sandbox layer knows nothing of environments (it is below them): a backend reads the image
(docker) or the environment's built python (local) from its SandboxSpec, and this module fills
those in from the environment's build before the backend creates the sandbox. Other backends
(entry points of group `rebench.sandboxes`) get the spec as given and the environment itself.
"""

from __future__ import annotations

from rebench.environments.registry import Environment
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.sandbox.factory import load_backend


def resolve_spec(backend: str, spec: SandboxSpec, env: Environment) -> SandboxSpec:
    """`spec` with what `backend` needs of `env` filled in; building nothing (a missing build is a
    one-line RebenchError naming the command that builds it)."""
    if backend == "local" and spec.python is None and not spec.keep_alive:
        # (a human attempt on the local backend is refused by the backend itself, built or not)
        from rebench.environments.build import local_python

        return spec.model_copy(update={"python": str(local_python(env, spec.profile, build=False))})
    if backend == "docker" and spec.image is None:
        from rebench.images.build import current_environment_image
        from rebench.sandbox.docker.engine import DockerEngine

        image = current_environment_image(env, spec.profile, DockerEngine.connect())
        return spec.model_copy(update={"image": image})
    return spec


def create_sandbox(backend: str, spec: SandboxSpec, env: Environment) -> Sandbox:
    """The runner's sandbox factory: build (not start) the attempt's sandbox on `backend`."""
    return load_backend(backend).create(resolve_spec(backend, spec, env), env)
