"""The agent of benchmarks/load.py: for a fixed working time, the traffic of an agent that mostly
waits on its model. Each turn is one streamed model call through the attempt's own gateway (the one
an installed CLI gets, on a Unix socket, metered and recorded), made by a client process of its own
(benchmarks/load_client.py: an installed agent's client runs in its container, not in the harness),
then a `bash`, a `write_file` and a `read_file` call into the sandbox; a score call every
`score_every` seconds. It writes what it
issued and how long each call took (one JSON line per call) to `out/ATTEMPT.jsonl`, for the
benchmark to set beside what the store kept.

Registered as agent `loadgen` through the `rebench.agents` entry-point group by the benchmark (a
plugin, as a third party's agent would be); not a built-in agent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rebench.agents.base import AgentConfig, AgentContext
from rebench.gateway.agent_meter import AgentGateway, agent_gateway_config

ROOT = Path(__file__).resolve().parents[1]


class LoadAgent:
    uses_reference = False
    arguments = frozenset({"out", "work_s", "score_every"})

    def __init__(self, out: Path, work_s: float, score_every: float) -> None:
        self.out, self.work_s, self.score_every = out, work_s, score_every

    async def run(self, ctx: AgentContext) -> None:
        calls = Path(tempfile.mkdtemp(prefix="loadgen-calls-"))
        gateway = AgentGateway(agent_gateway_config(ctx.config, 256), calls)
        await gateway.start(ctx)  # an AttemptContext is a MeteredAttempt: its clock and its records
        attempt = int(getattr(getattr(ctx, "recorder", None), "attempt_id", 0))
        log = (self.out / f"{attempt}.jsonl").open("a", encoding="utf-8")
        model = (ctx.config.model or "").split("/", 1)[-1]
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.load_client", str(gateway.socket_path), gateway.token, model,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=ROOT)
        try:
            last_score = ctx.elapsed_s()
            turn = 0
            log.write(json.dumps({"kind": "begin", "t": time.time()}) + "\n")
            while ctx.elapsed_s() < self.work_s:
                turn += 1
                await self._timed(log, "model_call", self._stream(client))
                await self._timed(log, "bash", ctx.bash(f"echo turn {turn}; ls /tmp | wc -l"))
                await self._timed(log, "write_file", ctx.write_file(f"turn-{turn % 8}.txt", "x" * 4096))
                await self._timed(log, "read_file", ctx.read_file(f"turn-{turn % 8}.txt"))
                if ctx.elapsed_s() - last_score >= self.score_every:
                    last_score = ctx.elapsed_s()
                    await self._timed(log, "score", ctx.score())
            log.write(json.dumps({"kind": "end", "t": time.time()}) + "\n")
        finally:
            log.close()
            if client.stdin is not None:
                client.stdin.close()
            await client.wait()
            await gateway.close()
        await ctx.submit()

    @staticmethod
    async def _timed(log: Any, kind: str, call: Any) -> None:
        started = time.perf_counter()
        await call
        log.write(json.dumps({"kind": kind, "ms": (time.perf_counter() - started) * 1000}) + "\n")
        log.flush()

    @staticmethod
    async def _stream(client: asyncio.subprocess.Process) -> None:
        assert client.stdin is not None and client.stdout is not None
        client.stdin.write(b"go\n")
        await client.stdin.drain()
        answer = (await client.stdout.readline()).decode().strip()
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"the model client failed: {answer or 'it ended'}")


def create_agent(config: AgentConfig) -> LoadAgent:
    return LoadAgent(Path(config.args["out"]), float(config.args.get("work_s", "180")),
                     float(config.args.get("score_every", "60")))
