"""Image names and the content hashes in their tags.

An image is rebuilt only when something it is made of changes: the Dockerfile,
the files copied into it, the image it starts from, and for environment images
the environment folder and the profile (`Environment.content_hash`). Where the
Dockerfiles are found: `rebench.resources`.
"""

from __future__ import annotations

import hashlib

from rebench.resources import dockerfiles_dir as dockerfiles_dir  # re-exported for the image builders

RAW_REPOSITORY = "rebench/debian"
RAW_TAG = "bookworm-minbase"
BASE_CPU = "rebench/base-cpu"
BASE_CUDA = "rebench/base-cuda"
LABEL_KIND = "rebench.image"
LABEL_AGENT_BASE = "rebench.agent-base"  # an installed agent's image: the environment image it is built on
"""Label on every image rebench builds: `raw`, `base-cpu`, `base-cuda` or `environment`."""


def digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()[:16]


def raw_image() -> str:
    return f"{RAW_REPOSITORY}:{RAW_TAG}"


def environment_repository(name: str) -> str:
    return f"rebench/env-{name}"


def environment_image(name: str, profile: str, content_hash: str) -> str:
    return f"{environment_repository(name)}:{profile}-{content_hash}"
