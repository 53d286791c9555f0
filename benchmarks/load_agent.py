"""The agent of benchmarks/load.py: for a fixed working time, the traffic of an agent that mostly
waits on its model. Each turn is one streamed model call through the attempt's own gateway (the one
an installed CLI gets, on a Unix socket, metered and recorded), then a `bash`, a `write_file` and a
`read_file` call into the sandbox; a score call every `score_every` seconds. It writes what it
issued and how long each call took (one JSON line per call) to `out/ATTEMPT.jsonl`, for the
benchmark to set beside what the store kept.

Registered as agent `loadgen` through the `rebench.agents` entry-point group by the benchmark (a
plugin, as a third party's agent would be); not a built-in agent.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from rebench.agents.base import AgentConfig, AgentContext
from rebench.gateway.agent_meter import AgentGateway, agent_gateway_config

PROMPT = "Say fifty words."


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
        transport = httpx2.AsyncHTTPTransport(uds=gateway.socket_path)
        headers = {"x-api-key": gateway.token, "anthropic-version": "2023-06-01"}
        try:
            async with httpx2.AsyncClient(transport=transport, base_url="http://gateway", headers=headers,
                                          timeout=120) as client:
                last_score = ctx.elapsed_s()
                turn = 0
                log.write(json.dumps({"kind": "begin", "t": time.time()}) + "\n")
                while ctx.elapsed_s() < self.work_s:
                    turn += 1
                    await self._timed(log, "model_call", self._stream(client, ctx.config.model or ""))
                    await self._timed(log, "bash", ctx.bash(f"echo turn {turn}; ls /tmp | wc -l"))
                    await self._timed(log, "write_file", ctx.write_file(f"turn-{turn % 8}.txt", "x" * 4096))
                    await self._timed(log, "read_file", ctx.read_file(f"turn-{turn % 8}.txt"))
                    if ctx.elapsed_s() - last_score >= self.score_every:
                        last_score = ctx.elapsed_s()
                        await self._timed(log, "score", ctx.score())
                log.write(json.dumps({"kind": "end", "t": time.time()}) + "\n")
        finally:
            log.close()
            await gateway.close()
        await ctx.submit()

    @staticmethod
    async def _timed(log: Any, kind: str, call: Any) -> None:
        started = time.perf_counter()
        await call
        log.write(json.dumps({"kind": kind, "ms": (time.perf_counter() - started) * 1000}) + "\n")
        log.flush()

    @staticmethod
    async def _stream(client: httpx2.AsyncClient, model: str) -> None:
        body = {"model": model.split("/", 1)[-1], "max_tokens": 128, "stream": True,
                "messages": [{"role": "user", "content": PROMPT}]}
        async with client.stream("POST", "/v1/messages", json=body) as reply:
            if reply.status_code != 200:
                raise RuntimeError(f"gateway answered {reply.status_code}: {(await reply.aread())[:300]!r}")
            async for _ in reply.aiter_lines():
                pass


def create_agent(config: AgentConfig) -> LoadAgent:
    return LoadAgent(Path(config.args["out"]), float(config.args.get("work_s", "180")),
                     float(config.args.get("score_every", "60")))
