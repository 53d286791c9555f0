"""Installed agents, declared rather than coded: a TOML file says how a command-line agent (Claude Code,
Codex, mini-swe-agent, ...) is installed into an image layer on top of the environment's image, how it
starts with the task's instructions, how it reaches the attempt's metered gateway, and where it keeps
its own session log. rebench.agents.installed runs any declaration the same way.

Declarations are found in rebench/agents/declarations/ (the shipped ones) and in the folders or files
named by $REBENCH_AGENT_DECLARATIONS (os.pathsep-separated), so a user adds an agent without touching
rebench. The file's stem is the agent's name.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rebench.errors import RebenchError
from rebench.images.agent_install import Install as Install  # the image layer's part

DECLARATIONS_ENV = "REBENCH_AGENT_DECLARATIONS"
BUILTIN_DIR = Path(__file__).with_name("declarations")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,40}$")


class AgentDeclaration(BaseModel):
    """One installed agent. Strings in `command`, `env` and `files` may name placeholders, filled per
    attempt: {gateway_url} (the agent's gateway, http://127.0.0.1:PORT, no /v1), {token} (its per-attempt
    token, never a provider key), {model} (the model name the gateway serves), {instructions_file},
    {home}, {solution}, and every key of `args` (defaults, overridden by `--agent-arg KEY=VALUE`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    api: Literal["anthropic", "openai"]
    """The API the agent speaks (Anthropic Messages, or OpenAI Responses/Chat); the gateway translates
    to the run's model's provider when they differ."""
    install: Install
    command: str
    """A bash command run as the agent's user in the solution folder; the instructions are in
    {instructions_file}."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of the command: the gateway and token, auto-update and telemetry off."""
    files: dict[str, str] = Field(default_factory=dict)
    """Files written into the agent's home before it starts (path relative to the home -> content):
    a config file naming the gateway as the provider."""
    session_logs: list[str] = Field(default_factory=list)
    """Folders, relative to the agent's home, holding the agent's own transcript; copied out with the
    snapshot when the attempt ends."""
    args: dict[str, str] = Field(default_factory=dict)
    max_output_tokens: int = Field(32_000, ge=1)
    """The gateway's cap on one request's output tokens for this agent."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r}: an agent name is lower-case letters, digits and '-'")
        return value

    @field_validator("files", "session_logs")
    @classmethod
    def _relative(cls, value: dict[str, str] | list[str]) -> dict[str, str] | list[str]:
        for path in value:
            if path.startswith("/") or ".." in Path(path).parts:
                raise ValueError(f"{path!r} must be a path inside the agent's home (relative, no '..')")
        return value


def _sources() -> list[Path]:
    found = sorted(BUILTIN_DIR.glob("*.toml"))
    for entry in filter(None, os.environ.get(DECLARATIONS_ENV, "").split(os.pathsep)):
        path = Path(entry)
        if path.is_dir():
            found += sorted(path.glob("*.toml"))
        elif path.is_file():
            found.append(path)
        else:
            raise RebenchError(f"${DECLARATIONS_ENV} names {entry!r}, which is neither a folder nor a file")
    return found


def load_declaration(path: Path) -> AgentDeclaration:
    """A declaration file; a bad one is a one-line error naming the file and the field."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RebenchError(f"agent declaration {path}: {exc}") from None
    data.setdefault("name", path.stem)
    try:
        declared = AgentDeclaration.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "?"
        raise RebenchError(f"agent declaration {path}: {where}: {first['msg']}") from None
    if declared.name != path.stem:
        raise RebenchError(f"agent declaration {path}: name {declared.name!r} differs from the file's stem")
    return declared


def declared_agents() -> dict[str, Path]:
    """Agent name -> its declaration file; a user's file of a shipped name is an error, not an override."""
    found: dict[str, Path] = {}
    for path in _sources():
        if path.stem in found:
            raise RebenchError(f"two agent declarations named {path.stem!r}: {found[path.stem]} and {path}; "
                               "rename one")
        found[path.stem] = path
    return found
