"""A small AgentContext for unit tests of the modular agent and the model caller.

A test double for the runner's AttemptContext (rebench/context.py), used only
where a whole attempt is not the point: commands really run (through a real
local sandbox in a temporary folder, starting in its solution folder as the
runner's do), the clock is the real AttemptClock, limits behave like the
runner's, and everything is recorded in lists the tests inspect. Scoring is a
function the test supplies. Whole attempts are tested through the runner in
test_modular_runner.py.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rebench.agents.base import AgentConfig, EnvironmentInfo, LimitExceeded, ModelUsage
from rebench.clock import AttemptClock, PauseInterval
from rebench.sandbox.base import ExecResult, SandboxSpec
from rebench.sandbox.local import LocalSandbox


class ScratchContext:
    def __init__(
        self,
        root: Path,
        config: AgentConfig,
        *,
        budget_s: float = 300.0,
        instructions: str = "Make the tests pass.",
        scorer: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.sandbox = LocalSandbox(
            SandboxSpec(attempt_id=0, environment="scratch", profile="tiny"), root, sys.executable
        )
        self.paths = self.sandbox.paths
        for folder in (self.paths.home, self.paths.solution, self.paths.protected):
            Path(folder).mkdir(parents=True, exist_ok=True)
        self.instructions = instructions
        self.environment = EnvironmentInfo(
            name="scratch",
            title="Scratch task",
            version="0",
            profile="tiny",
            direction="lower",
            score_visible=True,
        )
        self.config = config
        self.budget_s = budget_s
        self.seed = 0
        self.reference_dir: Path | None = None
        self.clock = AttemptClock()
        self.clock.start()
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.usages: list[ModelUsage] = []
        self.scores: list[dict[str, Any]] = []
        self.submitted: str | bool | None = False
        self._scorer = scorer or (lambda: {"score": 1.0})

    def elapsed_s(self) -> float:
        return self.clock.working_seconds()

    def remaining_s(self) -> float:
        return max(0.0, self.budget_s - self.elapsed_s())

    async def bash(self, command: str, *, timeout: float | None = None) -> ExecResult:
        return await self._run(command, None, timeout, "bash", command=command)

    async def python(self, code: str, *, timeout: float | None = None) -> ExecResult:
        return await self._run("python -", code.encode(), timeout, "python", code=code)

    async def _run(
        self, line: str, stdin: bytes | None, timeout: float | None, kind: str, **shown: Any
    ) -> ExecResult:
        result = await self.sandbox.exec(line, timeout=timeout, stdin=stdin)
        self.events.append((kind, {**shown, "timeout": timeout, "exit_code": result.exit_code}))
        return result

    async def read_file(self, path: str) -> str:
        return Path(path).read_text()

    async def write_file(self, path: str, content: str | bytes) -> None:
        target = Path(path if path.startswith("/") else f"{self.paths.solution}/{path}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        self.events.append(("write_file", {"path": path}))

    async def upload_dir(self, source: Path, dest: str) -> None:
        raise NotImplementedError

    async def score(self) -> dict[str, Any]:
        feedback = self._scorer()
        self.scores.append(feedback)
        self.events.append(("score", {"feedback": feedback}))
        return feedback

    async def score_log(self) -> list[dict[str, Any]]:
        return list(self.scores)

    async def submit(self, answer: str | None = None) -> None:
        self.submitted = answer
        self.events.append(("submit", {"answer": answer}))

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def record_model_call(self, usage: ModelUsage, **event: Any) -> None:
        self.usages.append(usage)
        self.clock.model_wait_s += usage.wait_s
        self.events.append(("model_call", {**usage.model_dump(), **event}))
        tokens = sum(u.input_tokens + u.output_tokens for u in self.usages)
        cost = sum(u.cost_usd for u in self.usages)
        if self.config.token_limit is not None and tokens >= self.config.token_limit:
            raise LimitExceeded("tokens", f"{tokens} tokens")
        if self.config.cost_limit_usd is not None and cost >= self.config.cost_limit_usd:
            raise LimitExceeded("cost", f"${cost:.4f}")

    def log_event(self, kind: str, **data: Any) -> None:
        self.events.append((kind, data))

    @contextmanager
    def pause(self, reason: str) -> Iterator[PauseInterval]:
        with self.clock.paused_for(reason) as interval:
            yield interval

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]
