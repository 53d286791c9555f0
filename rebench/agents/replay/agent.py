"""The `replay` agent: runs a scripted list of actions, deterministically.

For tests, for reproducing an attempt, and for probing an environment by hand.
Script file (YAML or JSON), given as `--agent-arg script=PATH`:

    actions:
      - bash: "ls -la"                  # or {command: "...", timeout: 30}
      - python: "print(2 + 2)"
      - write_file: {path: solution.py, content: "..."}
      - score: {}
      - sleep: 5
      - submit: "optional answer"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from rebench.agents.base import AgentConfig, AgentContext
from rebench.errors import RebenchError


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Bash(_Action):
    kind: Literal["bash"] = "bash"
    command: str
    timeout: float | None = None


class Python(_Action):
    kind: Literal["python"] = "python"
    code: str
    timeout: float | None = None


class WriteFile(_Action):
    kind: Literal["write_file"] = "write_file"
    path: str
    content: str


class Score(_Action):
    kind: Literal["score"] = "score"


class Sleep(_Action):
    kind: Literal["sleep"] = "sleep"
    seconds: float = Field(ge=0)


class Submit(_Action):
    kind: Literal["submit"] = "submit"
    answer: str | None = None


Action = Annotated[Bash | Python | WriteFile | Score | Sleep | Submit, Field(discriminator="kind")]
_SHORTHAND = {"bash": "command", "python": "code", "sleep": "seconds", "submit": "answer"}


class ReplayScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    actions: list[Action]

    @model_validator(mode="before")
    @classmethod
    def _expand(cls, data: Any) -> Any:
        """Accept `- bash: "ls"` as well as `- {kind: bash, command: ls}`."""
        if not isinstance(data, dict) or not isinstance(data.get("actions"), list):
            return data
        expanded = []
        for item in data["actions"]:
            if isinstance(item, dict) and "kind" not in item and len(item) == 1:
                (kind, value), = item.items()
                if isinstance(value, dict):
                    item = {"kind": kind, **value}
                elif value is None:
                    item = {"kind": kind}
                else:
                    item = {"kind": kind, _SHORTHAND.get(kind, "value"): value}
            expanded.append(item)
        return {**data, "actions": expanded}


def load_script(path: Path) -> ReplayScript:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RebenchError(f"replay script {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        return ReplayScript.model_validate(data)
    except (ValueError, yaml.YAMLError) as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RebenchError(
                f"replay script {str(path)!r}: {where}: {first['msg']} "
                "(actions: bash, python, write_file, score, sleep, submit)"
            ) from None
        raise RebenchError(f"replay script {str(path)!r} is not valid YAML/JSON: {exc}") from None


class ReplayAgent:
    uses_reference = False
    arguments = frozenset({"script"})  # its `--agent-arg` keys; any other is refused (rebench.agents.registry)

    def __init__(self, script: ReplayScript) -> None:
        self.script = script

    async def run(self, ctx: AgentContext) -> None:
        for action in self.script.actions:
            match action:
                case Bash():
                    await ctx.bash(action.command, timeout=action.timeout)
                case Python():
                    await ctx.python(action.code, timeout=action.timeout)
                case WriteFile():
                    await ctx.write_file(action.path, action.content)
                case Score():
                    await ctx.score()
                case Sleep():
                    await ctx.sleep(action.seconds)
                case Submit():
                    await ctx.submit(action.answer)
                    return


TypeAdapter(Action)  # build the discriminated union once at import, so a schema error shows early


def create_agent(config: AgentConfig) -> ReplayAgent:
    script = config.args.get("script")
    if not script:
        raise RebenchError("the replay agent needs a script: --agent-arg script=PATH (YAML or JSON)")
    return ReplayAgent(load_script(Path(script)))
