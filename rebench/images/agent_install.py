"""What goes into an installed agent's image layer (rebench.images.agent_layer builds it): the part of an
agent's declaration (rebench.agents.declared) that the image layer needs, kept here so the images layer
does not import the agents layer above it."""

from __future__ import annotations

import re
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

_PINNED_NPM = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*@\d+\.\d+\.\d+[A-Za-z0-9.+-]*$")
_PINNED_PIP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\[\],-]*==[A-Za-z0-9.+!-]+$")
_DEBIAN = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")


class Install(BaseModel):
    """What goes into the agent's image layer, every package pinned so the layer is the same each build."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    apt: list[str] = Field(default_factory=list)
    """Debian packages (e.g. nodejs, npm), from the base image's sources."""
    npm: list[str] = Field(default_factory=list)
    """`npm install -g` packages, each `NAME@X.Y.Z`."""
    pip: list[str] = Field(default_factory=list)
    """`pip install` packages into their own venv (/opt/agent-venv, on PATH), each `NAME==VERSION`."""

    @field_validator("apt")
    @classmethod
    def _apt(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _DEBIAN.match(name):
                raise ValueError(f"{name!r} is not a Debian package name")
        return value

    @field_validator("npm")
    @classmethod
    def _npm(cls, value: list[str]) -> list[str]:
        for spec in value:
            if not _PINNED_NPM.match(spec):
                raise ValueError(f"{spec!r} is not pinned: write NAME@X.Y.Z")
        return value

    @field_validator("pip")
    @classmethod
    def _pip(cls, value: list[str]) -> list[str]:
        for spec in value:
            if not _PINNED_PIP.match(spec):
                raise ValueError(f"{spec!r} is not pinned: write NAME==VERSION")
        return value


class AgentImageRecipe(Protocol):
    """An agent as its image layer sees it (an AgentDeclaration): its name and what to install."""

    @property
    def name(self) -> str: ...

    @property
    def install(self) -> Install: ...
