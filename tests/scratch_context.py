"""The runner's AttemptContext on a scratch attempt, for unit tests of the modular agent and the model caller.

Everything is the product's code path (rebench/context.py): commands run through a
real local sandbox in a temporary folder, the clock is the real AttemptClock, model
calls, token and cost limits and events are recorded by the real AttemptRecorder
into a real SQLite database, which `events`, `usages` and `kinds()` read back.
Only scoring is a test double (a function the test supplies), since a scratch task
has no scorer installed. Whole attempts are tested through the runner in
test_modular_runner.py.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rebench.agents.base import AgentConfig, EnvironmentInfo, ModelUsage
from rebench.clock import AttemptClock
from rebench.context import AttemptContext, AttemptRecorder
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Event


class ScratchContext(AttemptContext):
    def __init__(
        self,
        root: Path,
        config: AgentConfig,
        *,
        budget_s: float = 300.0,
        instructions: str = "Make the tests pass.",
        scorer: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        sandbox = LocalSandbox(SandboxSpec(attempt_id=0, environment="scratch", profile="tiny"), root, sys.executable)
        asyncio.run(sandbox.start())
        self.store = Store(root / "scratch.db")
        with self.store.session() as session:
            attempt = Attempt(environment="scratch", profile="tiny", agent=config.name, model=config.model,
                              budget_s=budget_s, status=AttemptStatus.RUNNING)
            session.add(attempt)
            session.flush()
            attempt_id = attempt.id
        clock = AttemptClock()
        clock.start()
        super().__init__(
            sandbox=sandbox,
            recorder=AttemptRecorder(self.store, attempt_id, clock),
            clock=clock,
            instructions=instructions,
            environment=EnvironmentInfo(
                name="scratch", title="Scratch task", version="0", profile="tiny", direction="lower",
                score_visible=True,
            ),
            config=config,
            budget_s=budget_s,
            seed=0,
            score_timeout_s=60.0,
            reference_dir=None,
        )
        self._scorer = scorer or (lambda: {"score": 1.0})

    async def score(self) -> dict[str, Any]:
        """The test's scorer in place of run_scoring, recorded like the real one."""
        feedback = self._scorer()
        self.recorder.event("score", feedback=feedback)
        return feedback

    @property
    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """Every event recorded so far, as committed to the database."""
        self.recorder.flush()
        with self.store.session() as session:
            rows = session.scalars(select(Event).where(Event.attempt_id == self.recorder.attempt_id)
                                   .order_by(Event.seq))
            return [(row.kind, row.data) for row in rows]

    @property
    def usages(self) -> list[ModelUsage]:
        """The model calls recorded, read back from their events."""
        fields = set(ModelUsage.model_fields)
        return [ModelUsage(**{k: v for k, v in data.items() if k in fields})
                for kind, data in self.events if kind == "model_call"]

    def attempt(self) -> Attempt:
        """The attempt row: the usage totals the real recorder committed."""
        with self.store.session() as session:
            return session.get_one(Attempt, self.recorder.attempt_id)

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]
