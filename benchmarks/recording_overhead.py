"""The harness's own share of a no-op tool call: recording, clock, limits, on top of the sandbox.

For each backend (local, and docker when an engine and the image are there) it times
N no-op calls (`true` through bash):

- sandbox only: `sandbox.exec("true")`, what the backend itself costs;
- through the harness: `ctx.bash("true")` on the runner's AttemptContext, recording with
  the buffered AttemptRecorder (events committed by its writer thread);
- through the harness, committing every event before the call returns (the old recorder's
  behaviour: one synchronous SQLite transaction per event), with SQLite's default
  synchronous=FULL and with synchronous=NORMAL, for comparison;
- the replay agent running N `bash: "true"` actions (the issue's measurement), per call.

The harness share is measured per call, not as a difference of two noisy runs: the sandbox
is wrapped so each call's time inside `sandbox.exec` is known, and the share is the call's
time minus that (on a shared machine the sandbox's own time varies far more than this).

    python benchmarks/recording_overhead.py [--calls 300] [--backend local|docker|both] [--image TAG]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import event

from rebench.agents.base import AgentConfig, EnvironmentInfo
from rebench.agents.replay.agent import ReplayAgent, ReplayScript
from rebench.clock import AttemptClock
from rebench.context import AttemptContext, AttemptRecorder
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus


class TimedSandbox:
    """The sandbox, with the time of each exec kept, so the harness's share of a call is exact."""

    def __init__(self, inner: Sandbox) -> None:
        self.inner = inner
        self.exec_s: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def exec(self, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await self.inner.exec(*args, **kwargs)
        finally:
            self.exec_s.append(time.perf_counter() - began)


def pct_ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def line(label: str, values: list[float], inner: list[float] | None = None) -> None:
    extra = ""
    if inner is not None:
        share = [total - spent for total, spent in zip(values, inner[-len(values):], strict=True)]
        extra = f"   harness share p50 {pct_ms(share, 0.5):5.2f} ms, p95 {pct_ms(share, 0.95):5.2f} ms"
    print(f"  {label:<46} p50 {pct_ms(values, 0.5):6.2f} ms   p95 {pct_ms(values, 0.95):6.2f} ms{extra}")


def context(sandbox: Sandbox, db: Path, synchronous: str | None = None) -> AttemptContext:
    store = Store(db)
    if synchronous is not None:
        event.listen(store.engine, "connect",
                     lambda conn, _rec: conn.execute(f"PRAGMA synchronous={synchronous}"))
        store.engine.dispose()
    with store.session() as session:
        row = Attempt(environment="benchmark", agent="replay", budget_s=3600, status=AttemptStatus.RUNNING)
        session.add(row)
        session.flush()
        attempt_id = row.id
    clock = AttemptClock()
    clock.start()
    return AttemptContext(
        sandbox=sandbox, recorder=AttemptRecorder(store, attempt_id, clock), clock=clock, instructions="",
        environment=EnvironmentInfo(name="benchmark", title="benchmark", version="0", profile="tiny",
                                    direction="higher", score_visible=True),
        config=AgentConfig(name="replay"), budget_s=3600, seed=0, score_timeout_s=60, reference_dir=None,
    )


async def timed(calls: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    for _ in range(10):  # warm up
        await call()
    out = []
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        out.append(time.perf_counter() - began)
    return out


async def measure(name: str, inner: Sandbox, calls: int, work: Path) -> None:
    sandbox = TimedSandbox(inner)
    await inner.start()
    try:
        print(f"{name} backend, {calls} no-op calls")
        line("sandbox only: sandbox.exec('true')", await timed(calls, lambda: inner.exec("true")))
        ctx = context(sandbox, work / f"{name}-buffered.db")  # type: ignore[arg-type]
        line("ctx.bash('true'), buffered recorder", await timed(calls, lambda: ctx.bash("true")), sandbox.exec_s)
        ctx.recorder.close()
        for synchronous in ("FULL", "NORMAL"):
            sync_ctx = context(sandbox, work / f"{name}-sync-{synchronous}.db", synchronous)  # type: ignore[arg-type]

            async def committed_call(c: AttemptContext = sync_ctx) -> None:
                await c.bash("true")
                c.recorder.flush()

            line(f"ctx.bash, commit per event, sync={synchronous}", await timed(calls, committed_call), sandbox.exec_s)
            sync_ctx.recorder.close()
        replay_ctx = context(sandbox, work / f"{name}-replay.db")  # type: ignore[arg-type]
        agent = ReplayAgent(ReplayScript.model_validate({"actions": [{"bash": "true"}] * calls}))
        sandbox.exec_s.clear()
        began = time.perf_counter()
        await agent.run(replay_ctx)
        total = time.perf_counter() - began
        replay_ctx.recorder.close()
        print(f"  {f'replay agent, {calls} bash true actions':<46} mean {total / calls * 1000:6.2f} ms   "
              f"harness share mean {(total - sum(sandbox.exec_s)) / calls * 1000:5.2f} ms")
    finally:
        await inner.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--backend", choices=("local", "docker", "both"), default="both")
    parser.add_argument("--image", default="rebench/base-cpu:latest")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rebench-recording-") as folder:
        work = Path(folder)
        if args.backend in ("local", "both"):
            spec = SandboxSpec(attempt_id=0, environment="benchmark", profile="tiny")
            await measure("local", LocalSandbox(spec, work / "local", sys.executable), args.calls, work)
        if args.backend in ("docker", "both"):
            try:
                from rebench.sandbox.docker import DockerEngine, DockerSandbox

                engine = DockerEngine.connect()
            except Exception as exc:  # no engine here: say so and skip
                print(f"docker backend skipped: {type(exc).__name__}: {exc}")
                return
            if engine.image_id(args.image) is None:
                print(f"docker backend skipped: image {args.image} not found (rebench images bootstrap)")
                return
            spec = SandboxSpec(attempt_id=990_500, environment="benchmark", profile="tiny", image=args.image,
                               cpus=1.0, memory_gb=1.0)
            await measure("docker", DockerSandbox(spec, engine=engine), args.calls, work)


if __name__ == "__main__":
    asyncio.run(main())
