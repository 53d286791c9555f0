"""An installed agent's image: its declared packages as one layer on top of the environment's image.

The tag is a hash of the Dockerfile, the environment image's id and the declaration's install
section, so a layer is built once per environment image and agent version (CI builds it once) and
a changed pin builds a new one. Builds use host networking and the system CA bundle of the base
image, as the other image builds do (rebench.images.build).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from rebench.environments.build import build_lock
from rebench.errors import RebenchError
from rebench.images.agent_install import AgentImageRecipe
from rebench.images.naming import LABEL_AGENT_BASE, LABEL_KIND, digest, dockerfiles_dir
from rebench.paths import cache_dir
from rebench.sandbox.docker import DockerEngine

AGENT_REPOSITORY = "rebench/agent-{name}"


def agent_image_tag(engine: DockerEngine, environment_image: str, declaration: AgentImageRecipe) -> str:
    dockerfile = _dockerfile().read_bytes()
    base_id = engine.image_id(environment_image)
    if base_id is None:
        raise RebenchError(f"image {environment_image} not found; build the environment first")
    install = json.dumps(declaration.install.model_dump(), sort_keys=True).encode()
    env_name = environment_image.split("/", 1)[-1].replace(":", "-").replace("env-", "", 1)
    content = digest(dockerfile, base_id.encode(), install)
    return f"{AGENT_REPOSITORY.format(name=declaration.name)}:{env_name}-{content}"


def _dockerfile() -> Path:
    path = dockerfiles_dir() / "agent.Dockerfile"
    if not path.is_file():
        raise RebenchError(f"{path} is missing; is REBENCH_DOCKERFILES pointing at the dockerfiles/ folder?")
    return path


def build_agent_image(engine: DockerEngine, environment_image: str, declaration: AgentImageRecipe,
                      log: object = None) -> str:
    """The agent's image on top of `environment_image`: cached by content, built when missing."""
    tag = agent_image_tag(engine, environment_image, declaration)
    if engine.image_id(tag) is not None:
        return tag
    with build_lock(cache_dir() / "agent-images" / tag.replace("/", "_").replace(":", "_")):
        if engine.image_id(tag) is None:  # parallel attempts: the first builds, the others wait for it
            _build(engine, environment_image, declaration, tag, log)
    return tag


def _build(engine: DockerEngine, environment_image: str, declaration: AgentImageRecipe, tag: str,
           log: object) -> None:
    install = declaration.install
    with tempfile.TemporaryDirectory(prefix="rebench-agent-", dir=cache_dir()) as scratch:
        context = Path(scratch)
        (context / "Dockerfile").write_bytes(_dockerfile().read_bytes())
        engine.build(context, "Dockerfile", tag, {
            "BASE_IMAGE": environment_image,
            "AGENT": declaration.name,
            "APT_PACKAGES": " ".join(install.apt),
            "NPM_PACKAGES": " ".join(install.npm),
            "PIP_PACKAGES": " ".join(install.pip),
        }, {LABEL_KIND: "agent", LABEL_AGENT_BASE: environment_image}, log if callable(log) else (lambda _line: None))
