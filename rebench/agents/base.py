"""The Agent protocol and the context every agent acts through.

Everything an agent does goes through its context, so the harness can time,
count, limit and record it. An agent that reaches around the context (its own
subprocesses, its own HTTP clients) escapes the clock and the event log.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from rebench.clock import PauseInterval
from rebench.errors import LimitExceeded as LimitExceeded  # re-exported: it lives in rebench.errors now
from rebench.models.usage import ModelUsage as ModelUsage  # re-exported: agents record calls with it
from rebench.sandbox.base import ExecResult, SandboxPaths


class AgentConfig(BaseModel):
    """How the user asked for an agent: `--agent NAME --model M --agent-arg k=v`."""

    name: str
    model: str | None = None
    base_url: str | None = None
    args: dict[str, str] = Field(default_factory=dict)
    token_limit: int | None = None
    cost_limit_usd: float | None = None


class EnvironmentInfo(BaseModel):
    """What an agent may know about the environment it is in."""

    name: str
    title: str
    version: str
    profile: str
    direction: Literal["lower", "higher"]
    score_visible: bool
    hardware_dependent: bool = False
    """Scores are timings on this machine, so single score calls are noisy."""
    final_score: Literal["best", "last", "rescore_best"] = "best"
    """How the attempt's final score is taken; with `rescore_best` the harness re-scores the best
    scored solutions itself when the attempt ends, so scoring one solution many times gains nothing."""


@runtime_checkable
class AgentContext(Protocol):
    """The agent's only door to the world: tools, instructions, clock and budget."""

    instructions: str
    environment: EnvironmentInfo
    config: AgentConfig
    budget_s: float
    seed: int
    reference_dir: Path | None
    """The reference solution; set only for agents that declare `uses_reference = True`."""

    @property
    def paths(self) -> SandboxPaths: ...

    def elapsed_s(self) -> float: ...

    def remaining_s(self) -> float: ...

    async def bash(self, command: str, *, timeout: float | None = None) -> ExecResult: ...

    async def python(self, code: str, *, timeout: float | None = None) -> ExecResult: ...

    async def read_file(self, path: str) -> str: ...

    async def write_file(self, path: str, content: str | bytes) -> None: ...

    async def upload_dir(self, source: Path, dest: str) -> None: ...

    async def score(self) -> dict[str, Any]: ...

    async def score_log(self) -> list[dict[str, Any]]: ...

    async def submit(self, answer: str | None = None) -> None: ...

    async def sleep(self, seconds: float) -> None: ...

    def record_model_call(self, usage: ModelUsage, **event: Any) -> None:
        """Record one model call; raises LimitExceeded when a token or cost limit is reached."""
        ...

    def log_event(self, kind: str, **data: Any) -> None: ...

    def pause(self, reason: str) -> AbstractContextManager[PauseInterval]:
        """Stop the clock for a block, e.g. waiting out a provider's rate limit."""
        ...


@runtime_checkable
class Agent(Protocol):
    """An agent under test. `run` returns when the agent submits or gives up;
    the harness cancels it when the budget runs out."""

    uses_reference: bool

    async def run(self, ctx: AgentContext) -> None: ...
