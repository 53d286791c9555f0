"""What one model call of rebench's own agents costs the harness as the conversation grows, against the
same request sent with a bare HTTP client (httpx), side by side in one run; and the longest stall of
the shared event loop that a neighbour task sees meanwhile.

The model server is tests/fake_model_server.py in a process of its own (its CPU is not counted). The
harness side is the modular agent's own per-call path (`ModularAgent._complete`: the token estimate,
trimming, the provider SDK's request, the request log and the `model_call` event through a real
AttemptRecorder into SQLite). The bare side posts the same body, already translated outside the
timing, with `httpx` and reads the JSON reply: the floor any client pays (serializing and sending the
bytes, parsing the reply). Each turn adds an assistant tool call, a 4 KB tool output and a time note.

- per call: at each number of turns, warm-up calls, then `--calls` measured calls (each adds a turn),
  harness and bare in turns; the median process CPU and wall per call, the harness's CPU beyond the
  bare client's, and the longest lateness of a neighbour task that sleeps 1 ms in a loop;
- at once (`--attempts`): that many attempts at `--at-once-turns` turns calling a server that answers
  in 300 ms, each pausing 0-300 ms between calls (its tool call); p50 and p99 of each call's wall
  time beyond those 300 ms, harness and bare (apart), beside one attempt alone.

Goals (issue 64): at 300 turns at most 2 ms of CPU per call beyond the bare client, for both providers,
no stall over 10 ms; p99 at 16 attempts at most twice that of one.

    python -m benchmarks.model_call_cost [--turns 10,100,300] [--calls 8] [--attempts 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rebench.agents.base import AgentConfig, EnvironmentInfo  # noqa: E402
from rebench.agents.modular.agent import ModularAgent  # noqa: E402
from rebench.agents.modular.settings import parse_settings  # noqa: E402
from rebench.clock import AttemptClock  # noqa: E402
from rebench.context import AttemptContext, AttemptRecorder  # noqa: E402
from rebench.models import Message, ModelCaller, ToolCall, create_model_client, model_price, model_spec  # noqa: E402
from rebench.models.anthropic_provider import to_anthropic_messages, to_anthropic_tools  # noqa: E402
from rebench.models.openai_provider import to_openai_messages, to_openai_tools  # noqa: E402
from rebench.sandbox.base import SandboxSpec  # noqa: E402
from rebench.sandbox.local import LocalSandbox  # noqa: E402
from rebench.store.db import Store  # noqa: E402
from rebench.store.models import Attempt, AttemptStatus  # noqa: E402

PROVIDERS = {"openai": "openai-compatible/bench", "anthropic": "anthropic/bench"}
SYSTEM = "You are an autonomous agent doing a research engineering task in a sandbox. " * 30
OUTPUT_CHARS = 4096
MAX_OUTPUT = 4096
STEP = {"text": "", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
        "usage": {"input_tokens": 1000, "output_tokens": 20}}


def start_fake(folder: Path, delay_s: float) -> tuple[subprocess.Popen[str], str]:
    script = folder / f"script-{time.time_ns()}.json"
    script.write_text(json.dumps([{**STEP, "delay_s": delay_s}]))
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_model_server.py"), "--port", "0",
                                "--script", str(script), "--repeat"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()  # "fake model server on http://127.0.0.1:PORT (OpenAI base URL ...)"
    return process, line.split(" on ", 1)[1].split(" ", 1)[0]


class Neighbour:
    """Another attempt's task on the same loop, waking every millisecond. `worst`: its longest lateness;
    `worst_cpu`: the most CPU the loop's thread spent between two of its wakes (what the loop itself
    ran; the lateness also counts the machine's other processes taking the core)."""

    def __init__(self) -> None:
        self.worst = self.worst_cpu = 0.0

    async def run(self) -> None:
        while True:
            started, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(0.001)
            self.worst = max(self.worst, time.perf_counter() - started - 0.001)
            self.worst_cpu = max(self.worst_cpu, time.thread_time() - cpu)


def add_turn(messages: list[Message], turn: int) -> None:
    call = ToolCall(id=f"call_{turn}", name="bash", arguments={"command": f"python bench.py --variant {turn}"})
    output = (f"exit code: 0\nstdout:\n{f'variant {turn}: ' * (OUTPUT_CHARS // 12)}")[:OUTPUT_CHARS]
    messages += [Message(role="assistant", content=f"Trying variant {turn}.", tool_calls=[call]),
                 Message(role="tool", tool_call_id=call.id, tool_name="bash", content=output),
                 Message(role="user", content=f"[Time: {turn} minutes of 480 used]")]


class BenchAttempt:
    """One attempt's modular agent, model client and real recorder, on the benchmark's store."""

    def __init__(self, store: Store, folder: Path, provider: str, url: str, window: int) -> None:
        base_url = url + "/v1" if provider == "openai" else url
        self.config = AgentConfig(name="modular", model=PROVIDERS[provider], base_url=base_url,
                                  args={"context_window": str(window), "max_output_tokens": str(MAX_OUTPUT)})
        self.provider, self.url, self.window = provider, url, window
        with store.session() as session:
            row = Attempt(environment="bench", profile="tiny", agent="modular", model=self.config.model,
                          budget_s=3600.0, status=AttemptStatus.RUNNING)
            session.add(row)
            session.flush()
            attempt_id = row.id
        clock = AttemptClock()
        clock.start()
        sandbox = LocalSandbox(SandboxSpec(attempt_id=attempt_id, environment="bench", profile="tiny"),
                               folder / f"sandbox-{attempt_id}", sys.executable)
        self.ctx = AttemptContext(
            sandbox=sandbox, recorder=AttemptRecorder(store, attempt_id, clock), clock=clock, instructions="bench",
            environment=EnvironmentInfo(name="bench", title="Bench", version="0", profile="tiny", direction="lower",
                                        score_visible=True),
            config=self.config, budget_s=3600.0, seed=0, score_timeout_s=60.0, reference_dir=None)
        self.agent = ModularAgent(self.config, parse_settings(self.config.args))
        spec = model_spec(self.config)
        self.client = create_model_client(self.config)
        self.caller = ModelCaller(self.client, self.ctx, model_price(self.config, spec))
        self.messages = [Message(role="user", content="The task: make the kernel fast. " * 60)]
        self.turn = 0

    async def harness_call(self) -> None:
        self.turn += 1
        await self.agent._complete(self.ctx, self.caller, SYSTEM, self.messages, self.window, self.turn)

    def bare_request(self) -> tuple[str, dict[str, str], bytes | dict[str, Any]]:
        """The same request's URL, headers and body, translated outside the timing."""
        tools = self.agent_tools()
        if self.provider == "openai":
            body: dict[str, Any] = {"model": "bench", "messages": to_openai_messages(SYSTEM, self.messages),
                                    "tools": to_openai_tools(tools), "max_tokens": MAX_OUTPUT}
            return self.url + "/v1/chat/completions", {"authorization": "Bearer no-key"}, body
        body = {"model": "bench", "max_tokens": MAX_OUTPUT, "messages": to_anthropic_messages(self.messages),
                "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                "tools": to_anthropic_tools(tools)}
        return self.url + "/v1/messages", {"x-api-key": "bench", "anthropic-version": "2023-06-01"}, body

    def agent_tools(self) -> list[Any]:
        from rebench.agents.modular.tools import tool_specs

        return tool_specs(self.agent.settings)

    async def close(self) -> None:
        await self.client.close()
        self.ctx.recorder.close()


async def bare_call(http: httpx.AsyncClient, request: tuple[str, dict[str, str], Any]) -> None:
    url, headers, body = request
    response = await http.post(url, headers=headers, json=body)
    response.raise_for_status()
    response.json()


async def per_call(store: Store, folder: Path, provider: str, url: str, turns: int, calls: int,
                   window: int) -> dict[str, float]:
    attempt = BenchAttempt(store, folder, provider, url, window)
    neighbour = Neighbour()
    ticking = asyncio.create_task(neighbour.run())
    cpu: dict[str, list[float]] = {"harness": [], "bare": []}
    wall: dict[str, list[float]] = {"harness": [], "bare": []}
    stall = {"harness": 0.0, "bare": 0.0}
    stall_cpu = {"harness": 0.0, "bare": 0.0}
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            while attempt.turn < turns - 3:
                attempt.turn += 1
                add_turn(attempt.messages, attempt.turn)
            for index in range(2 + calls):
                request = attempt.bare_request()
                for side in ("harness", "bare"):
                    await asyncio.sleep(0.005)  # let the neighbour and the recorder's writer settle
                    neighbour.worst = neighbour.worst_cpu = 0.0
                    cpu0, wall0 = time.process_time(), time.perf_counter()
                    await (attempt.harness_call() if side == "harness" else bare_call(http, request))
                    cpu1, wall1 = time.process_time(), time.perf_counter()
                    if index >= 2:
                        cpu[side].append(cpu1 - cpu0)
                        wall[side].append(wall1 - wall0)
                        stall[side] = max(stall[side], neighbour.worst)
                        stall_cpu[side] = max(stall_cpu[side], neighbour.worst_cpu)
                add_turn(attempt.messages, attempt.turn)
    finally:
        ticking.cancel()
        await attempt.close()
    row = {f"{side}_{what}": statistics.median(values[side]) * 1000
           for what, values in (("cpu", cpu), ("wall", wall)) for side in ("harness", "bare")}
    stalls = {f"{side}_{name}": values[side] * 1000 for name, values in (("stall", stall), ("stall_cpu", stall_cpu))
              for side in ("harness", "bare")}
    return {**row, **stalls}


async def at_once(store: Store, folder: Path, provider: str, url: str, attempts: int, turns: int,
                  calls: int) -> dict[str, float]:
    """p50 and p99 of wall time beyond the server's 300 ms with `attempts` at once: the harness's
    attempts first, then as many bare clients (apart, so that neither slows the other's loop)."""
    beyond: dict[str, list[float]] = {"harness": [], "bare": []}
    pace = random.Random(attempts)

    async def one(attempt: BenchAttempt, http: httpx.AsyncClient, side: str) -> None:
        while attempt.turn < turns:
            attempt.turn += 1
            add_turn(attempt.messages, attempt.turn)
        for index in range(1 + calls):  # the first call opens the connection: the server's backlog is 5
            request = attempt.bare_request()
            started = time.perf_counter()
            await (attempt.harness_call() if side == "harness" else bare_call(http, request))
            if index:
                beyond[side].append(time.perf_counter() - started - 0.3)
            add_turn(attempt.messages, attempt.turn)
            await asyncio.sleep(pace.uniform(0.0, 0.3))  # its tool call: attempts do not call in step

    for side in ("harness", "bare"):
        group = [BenchAttempt(store, folder, provider, url, 10_000_000) for _ in range(attempts)]
        try:
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=attempts)) as http:
                await asyncio.gather(*(one(attempt, http, side) for attempt in group))
        finally:
            for attempt in group:
                await attempt.close()
    result: dict[str, float] = {}
    for side, values in beyond.items():
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        result[f"{side}_p50"], result[f"{side}_p99"] = cuts[49] * 1000, cuts[98] * 1000
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="10,100,300", help="numbers of turns; N:W trims to a window of W tokens")
    parser.add_argument("--calls", type=int, default=8, help="measured calls at each number of turns")
    parser.add_argument("--providers", default="openai,anthropic")
    parser.add_argument("--attempts", type=int, default=16, help="attempts at once (0: skip that part)")
    parser.add_argument("--at-once-turns", type=int, default=20)
    parser.add_argument("--at-once-calls", type=int, default=6)
    args = parser.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench-key-not-secret")
    os.environ.pop("REBENCH_PRICES", None)
    providers = args.providers.split(",")
    with tempfile.TemporaryDirectory(prefix="model-call-cost-") as tmp:
        folder = Path(tmp)
        store = Store(folder / "bench.db")
        fast, fast_url = start_fake(folder, 0.0)
        slow, slow_url = start_fake(folder, 0.3)
        try:
            print("per call (ms; medians of the calls; stall: the neighbour's longest lateness over them, and in "
                  "brackets the most CPU the loop ran between two of its wakes)")
            print(f"{'provider':<10} {'turns':>10} {'harness cpu':>12} {'bare cpu':>9} {'cpu beyond':>11} "
                  f"{'harness wall':>13} {'bare wall':>10} {'harness stall':>16} {'bare stall':>16}")
            for provider in providers:
                for spec in args.turns.split(","):
                    turns, _, window = spec.partition(":")
                    row = asyncio.run(per_call(store, folder, provider, fast_url, int(turns), args.calls,
                                               int(window or 10_000_000)))
                    print(f"{provider:<10} {spec:>10} {row['harness_cpu']:>12.2f} {row['bare_cpu']:>9.2f} "
                          f"{row['harness_cpu'] - row['bare_cpu']:>11.2f} {row['harness_wall']:>13.2f} "
                          f"{row['bare_wall']:>10.2f} {row['harness_stall']:>7.2f} ({row['harness_stall_cpu']:>6.2f}) "
                          f"{row['bare_stall']:>7.2f} ({row['bare_stall_cpu']:>6.2f})",
                          flush=True)
            if args.attempts:
                print(f"\nat once (ms of wall per call beyond the server's 300 ms; {args.at_once_turns} turns, "
                      f"{args.at_once_calls} calls each)")
                print(f"{'provider':<10} {'attempts':>8} {'harness p50':>12} {'harness p99':>12} {'bare p50':>9} "
                      f"{'bare p99':>9}")
                for provider in providers:
                    for count in (1, args.attempts):
                        calls = args.at_once_calls * (4 if count == 1 else 1)
                        row = asyncio.run(at_once(store, folder, provider, slow_url, count, args.at_once_turns,
                                                  calls))
                        print(f"{provider:<10} {count:>8} {row['harness_p50']:>12.1f} {row['harness_p99']:>12.1f} "
                              f"{row['bare_p50']:>9.1f} {row['bare_p99']:>9.1f}", flush=True)
        finally:
            for process in (fast, slow):
                process.terminate()
                process.wait()


if __name__ == "__main__":
    main()
