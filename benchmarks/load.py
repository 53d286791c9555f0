"""Many attempts at once on the Docker backend: what the harness costs per attempt at N = 1, 16, 64,
and whether anything is lost, side by side in one run (issue 51).

For each N, one campaign of N attempts (`--parallel N`) of the counter fixture (a `load` profile of
0.25 GB and no reserved CPU: the agents mostly wait on their model) runs in this process through
`rebench.api.run_campaign`, with the benchmark's own agent `loadgen` (benchmarks/load_agent.py,
registered as a plugin): for `--minutes` of working time each attempt loops over a streamed model
call through its own gateway to a fake Anthropic provider in another process (first token after
300 ms, 50 chunks 10 ms apart), made by a client process of the agent's own as an installed agent's
client is (benchmarks/load_client.py), then `bash`, `write_file` and `read_file` calls into its sandbox,
and a score call every minute.

Measured per N: tool-call latency (p50, p99), the gateway's overhead on a model call (the call's time
less the provider's scripted 0.8 s), the harness's CPU (this process's) per attempt-minute while
every agent works (`_all`: from the campaign's start to its end, builds, container starts and scoring included), the
machine's (every process: the containers' commands, the engine, the model clients and provider), its
peak RSS, the containers' memory per attempt (their cgroups), the
store's write transactions (p99), and what was issued against what the store holds (events, model
calls, one gateway row per call), and the containers left after.

Goals (issue 51): nothing lost at any N; p99 tool call and gateway overhead at N = 64 at most 2x
their p99 at N = 1; harness CPU at most 2% of one core per attempt (1.2 CPU-s per attempt-minute).
An N the host cannot hold at once (the scheduler's own arithmetic, rebench.scheduler.concurrency) is
said and the largest N that fits is measured instead.

    python -m benchmarks.load [--attempts 1,16,64] [--minutes 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from benchmarks.gateway_overhead import percentile, start_fake

ROOT = Path(__file__).resolve().parents[1]
ENV = "loadbench"
PROVIDER_S = 0.3 + 50 * 0.01
STEP = {"text": " ".join(["word"] * 50), "chunks": 50, "delay_s": 0.3, "chunk_delay_s": 0.01,
        "usage": {"input_tokens": 40, "output_tokens": 50}}
PROFILE = """
[profiles.load]
description = "Many light attempts at once (benchmarks/load.py)."
resources = { gpus = 0, cpus = 0.5, memory_gb = 0.25 }
direction = "higher"
final_score = "best"
score_timeout_s = 20
anchors = { start = 1.0, reference = 11.0, source = "by construction" }
params = { secret_file = "answer.txt" }
"""


def environment(folder: Path) -> Path:
    """The counter fixture as environment `loadbench`, with the `load` profile, alone in a folder."""
    envs = folder / "envs"
    shutil.copytree(ROOT / "tests" / "fixtures" / "envs" / "counter", envs / ENV)
    toml = envs / ENV / "environment.toml"
    toml.write_text(toml.read_text().replace('name = "counter"', f'name = "{ENV}"', 1) + PROFILE)
    return envs


def register_agent(folder: Path) -> None:
    """`loadgen` as a plugin in the `rebench.agents` entry-point group: a distribution's metadata on sys.path."""
    info = folder / "plugins" / "rebench_loadgen-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rebench-loadgen\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[rebench.agents]\nloadgen = benchmarks.load_agent:create_agent\n")
    sys.path.insert(0, str(info.parent))


class StoreWrites:
    """Durations of the store's write transactions (begin to commit of a session that flushed)."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        event.listen(Session, "after_begin", self._begin)
        event.listen(Session, "after_flush", self._flush)
        event.listen(Session, "after_commit", self._commit)

    @staticmethod
    def _begin(session: Session, *_: Any) -> None:
        session.info["bench_began"] = time.perf_counter()

    @staticmethod
    def _flush(session: Session, *_: Any) -> None:
        session.info["bench_wrote"] = True

    def _commit(self, session: Session) -> None:
        began = session.info.pop("bench_began", None)
        if session.info.pop("bench_wrote", False) and began is not None:
            self.ms.append((time.perf_counter() - began) * 1000)


class Sampler(threading.Thread):
    """This process's CPU and RSS every second, the campaign's containers' memory every 5 s, while it runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.rss_mb = 0.0
        self.containers_mb: list[float] = []
        self.cpu: list[tuple[float, float]] = []
        """(time, this process's CPU-s so far), to take the CPU of the window when every agent works."""
        self.machine: list[tuple[float, float]] = []
        """(time, the machine's busy CPU-s so far: every core, every process, the containers' too)."""

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(1.0):
            # the harness's CPU: the process's, less this thread's own (the sampling is the benchmark's)
            self.cpu.append((time.time(), _cpu_s() - time.thread_time()))
            self.machine.append((time.time(), _machine_busy_s()))
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.rss_mb = max(self.rss_mb, int(line.split()[1]) / 1024)
            tick += 1
            if tick % 5 == 0:
                self.containers_mb.append(containers_memory_mb())


_ENGINE: list[Any] = []


def containers() -> list[str]:
    """The ids of the benchmark's containers (one list call: no inspect of each, which races their removal)."""
    if not _ENGINE:
        import docker

        _ENGINE.append(docker.from_env())
    found = _ENGINE[0].api.containers(all=True, filters={"label": f"rebench.environment={ENV}"})
    return [str(entry["Id"]) for entry in found]


def containers_memory_mb() -> float:
    """The summed memory of the benchmark's running containers, from their cgroups (v2 or v1), in MB."""
    total = 0
    for container in containers():
        for pattern in (f"system.slice/docker-{container}.scope/memory.current",
                        f"docker/{container}/memory.current",
                        f"memory/docker/{container}/memory.usage_in_bytes"):  # cgroup v1
            path = Path("/sys/fs/cgroup") / pattern
            if path.exists():
                total += int(path.read_text())
                break
    return total / 1e6


def fits(envs: Path, attempts: int) -> tuple[int, str]:
    """How many of `attempts` this host runs at once, by the scheduler's arithmetic, and its line."""
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.scheduler.concurrency import host_concurrency
    from rebench.scheduler.queue import attempt_need, host_capacity

    os.environ["REBENCH_ENVIRONMENTS"] = str(envs)
    need = attempt_need(EnvironmentRegistry().get(ENV).profile("load"))
    concurrency = host_concurrency([(ENV, need)] * attempts, host_capacity(attempts))
    return concurrency.at_once, concurrency.text


def measure(n: int, folder: Path, provider: str, work_s: float, writes: StoreWrites) -> dict[str, Any]:
    from rebench import api
    from rebench.agents.base import AgentConfig

    out = folder / f"calls-{n}"
    out.mkdir()
    db = folder / f"load-{n}.db"
    agent = AgentConfig(name="loadgen", model="anthropic/bench", base_url=provider,
                        args={"out": str(out), "work_s": str(work_s), "score_every": "60"})
    spec = api.CampaignSpec(environments=[ENV], profile="load", budget_s=work_s + 120, k=n, parallel=n,
                            backend="docker", agent=agent)
    writes.ms.clear()
    sampler = Sampler()
    sampler.start()
    cpu0 = _cpu_s()
    result = api.run_campaign(spec, db=db)
    cpu = _cpu_s() - cpu0
    sampler.stop.set()
    sampler.join()
    calls = [json.loads(line) for f in out.glob("*.jsonl") for line in f.read_text().splitlines()]
    tools = [c["ms"] for c in calls if c["kind"] in ("bash", "write_file", "read_file")]
    overhead = [c["ms"] - PROVIDER_S * 1000 for c in calls if c["kind"] == "model_call"]
    issued = sum(1 for c in calls if c["kind"] in ("bash", "write_file", "read_file", "model_call", "score"))
    with sqlite3.connect(db) as connection:
        stored = connection.execute(
            "select count(*) from events where kind in ('bash', 'write_file', 'read_file', 'model_call', 'score') "
            "and attempt_id in (select id from attempts where campaign_id = ?)", (result.campaign_id,)).fetchone()[0]
        rows = connection.execute("select count(*) from gateway_requests where status = 200 and "
                                  "endpoint = '/v1/messages'").fetchone()[0]
    busy = [m for m in sampler.containers_mb if m > 0]
    minutes = n * work_s / 60
    began = max(c["t"] for c in calls if c["kind"] == "begin")
    ended = min(c["t"] for c in calls if c["kind"] == "end")
    steady = _rate(sampler.cpu, began, ended, n)
    machine = _rate(sampler.machine, began, ended, n)
    return {"attempts": n, "done": sum(o.status == "done" for o in result.outcomes),
            "tool_p50_ms": round(statistics.median(tools), 2), "tool_p99_ms": round(percentile(tools, 0.99), 2),
            "gateway_overhead_p50_ms": round(statistics.median(overhead), 2),
            "gateway_overhead_p99_ms": round(percentile(overhead, 0.99), 2),
            "harness_cpu_s_per_attempt_min": round(steady, 3) if steady is not None else None,
            "harness_cpu_s_per_attempt_min_all": round(cpu / minutes, 3),
            "machine_cpu_s_per_attempt_min": round(machine, 3) if machine is not None else None,
            "harness_rss_mb": round(sampler.rss_mb, 1),
            "memory_mb_per_attempt": round(statistics.median(busy) / n, 1) if busy else None,
            "store_write_p99_ms": round(percentile(writes.ms, 0.99), 2) if writes.ms else None,
            "events_issued": issued, "events_stored": stored,
            "model_calls_issued": len(overhead), "model_calls_stored": rows,
            "containers_left": len(containers())}


def _machine_busy_s() -> float:
    """The machine's CPU time spent on anything but idling (all cores, from /proc/stat; steal included:
    time a shared host took from this one)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _rate(samples: list[tuple[float, float]], began: float, ended: float, n: int) -> float | None:
    """CPU-s per attempt-minute between began and ended, from cumulative samples."""
    window = [(t, used) for t, used in samples if began <= t <= ended]
    if len(window) < 2:
        return None
    return (window[-1][1] - window[0][1]) / (n * (window[-1][0] - window[0][0]) / 60)


def _cpu_s() -> float:
    """This process's CPU: the agents' model clients are processes of their own (as in a container)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def machine() -> dict[str, Any]:
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    return {"cpus": len(os.sched_getaffinity(0)), "memory_gb": round(memory_gb, 1), "python": platform.python_version(),
            "kernel": platform.release()}


def table(runs: list[dict[str, Any]]) -> str:
    keys = [k for k in runs[0] if k != "attempts"]
    lines = [f"{'':32}" + "".join(f"{'N=' + str(r['attempts']):>12}" for r in runs)]
    lines += [f"{key:32}" + "".join(f"{r[key]!s:>12}" for r in runs) for key in keys]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", default="1,16,64")
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    wanted = [int(part) for part in args.attempts.split(",")]
    folder = Path(tempfile.mkdtemp(prefix="rebench-load-"))
    envs = environment(folder)
    register_agent(folder)
    os.environ.setdefault("ANTHROPIC_API_KEY", "sk-load-benchmark")
    fake, url = start_fake(folder, STEP)
    writes = StoreWrites()
    runs = []
    try:
        for n in wanted:
            at_once, line = fits(envs, n)
            if at_once < n:
                print(f"N={n} does not fit this host at once ({line}): measuring N={at_once}", flush=True)
                n = at_once
            print(f"N={n}: {n} attempt(s) of {args.minutes:g} min ...", flush=True)
            runs.append(measure(n, folder, url.removesuffix("/v1"), args.minutes * 60, writes))
    finally:
        fake.terminate()
    print(table(runs))
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, "machine": machine()}, indent=2))


if __name__ == "__main__":
    main()
