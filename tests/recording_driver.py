"""A harness process for the SIGKILL test: the runner's AttemptContext on a local sandbox.

    python -m tests.recording_driver DB ROOT

Runs no-op `bash true` tool calls through the real AttemptContext and AttemptRecorder
(one event each) until killed, and commits a score after calls 10 and 20 only, so that
later events reach the database through the recorder's writer thread alone. After each
call returns it prints `event N T` (N = the event's seq, T = time.time()), and after
each score returns `score N`, so the test knows what the harness had reported when it
was killed.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from rebench.agents.base import AgentConfig, EnvironmentInfo
from rebench.clock import AttemptClock
from rebench.context import AttemptContext, AttemptRecorder
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.scoring.result import ScoreResult
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, ScoreKind

SCORE_AFTER = (10, 20)


async def main(db: Path, root: Path) -> None:
    store = Store(db)
    with store.session() as session:
        attempt = Attempt(environment="scratch", profile="tiny", agent="driver", model=None, budget_s=3600,
                          status=AttemptStatus.RUNNING)
        session.add(attempt)
        session.flush()
        attempt_id = attempt.id
    sandbox = LocalSandbox(SandboxSpec(attempt_id=attempt_id, environment="scratch", profile="tiny"), root,
                           sys.executable)
    await sandbox.start()
    clock = AttemptClock()
    clock.start()
    recorder = AttemptRecorder(store, attempt_id, clock)
    ctx = AttemptContext(
        sandbox=sandbox, recorder=recorder, clock=clock, instructions="none",
        environment=EnvironmentInfo(name="scratch", title="Scratch", version="0", profile="tiny",
                                    direction="higher", score_visible=True),
        config=AgentConfig(name="driver"), budget_s=3600, seed=0, score_timeout_s=60, reference_dir=None,
    )
    calls = 0
    while True:
        await ctx.bash("true")
        calls += 1
        print(f"event {calls} {time.time():.6f}", flush=True)
        if calls in SCORE_AFTER:
            recorder.score(ScoreResult(raw=float(calls)), ScoreKind.INTERMEDIATE)
            print(f"score {calls}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
