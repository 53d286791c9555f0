"""Per-step tax of the docker backend, on one container:

- p50/p95 latency of a no-op tool call through our exec channel (200 calls), as a
  bare program (`true`) and through bash (`bash -c true`, what `ctx.bash` runs), each beside
  the same command spawned on the host (`subprocess.run`), in turns with it so that the
  load of a shared machine weighs on both alike, and their ratio;
- the same no-op through the `docker exec` command line and a plain SDK exec;
- container start-to-ready time with a cached image (create, attach, start, health check).

    python benchmarks/sandbox_overhead.py [--image TAG] [--calls 200] [--starts 7]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.docker import DockerEngine, DockerSandbox


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def line(label: str, values: list[float]) -> None:
    print(f"{label:<44} p50 {pct(values, 0.5):7.2f} ms   p95 {pct(values, 0.95):7.2f} ms   (n={len(values)})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--image", default="rebench/base-cpu:latest")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=7)
    args = parser.parse_args()
    engine = DockerEngine.connect()
    if engine.image_id(args.image) is None:
        sys.exit(f"image {args.image} not found; run `rebench images bootstrap` first")

    def spec(i: int) -> SandboxSpec:
        return SandboxSpec(
            attempt_id=990_000 + i,
            environment="benchmark",
            profile="tiny",
            image=args.image,
            cpus=1.0,
            memory_gb=1.0,
        )

    starts: list[float] = []
    for i in range(args.starts):
        sandbox = DockerSandbox(spec(i), engine=engine)
        await sandbox.start()
        assert sandbox.start_to_ready_s is not None
        starts.append(sandbox.start_to_ready_s)
        await sandbox.stop()

    sandbox = DockerSandbox(spec(args.starts), engine=engine)
    await sandbox.start()
    try:
        for _ in range(10):  # warm up
            await sandbox.exec(["true"])
        ours_bare, ours_bash, host_bare, host_bash, cli, sdk = [], [], [], [], [], []
        for _ in range(args.calls):
            for command, ours, host in ((["true"], ours_bare, host_bare), ("true", ours_bash, host_bash)):
                began = time.perf_counter()
                result = await sandbox.exec(command)
                ours.append(time.perf_counter() - began)
                assert result.ok
                began = time.perf_counter()
                subprocess.run(["bash", "-c", command] if isinstance(command, str) else command, check=True)
                host.append(time.perf_counter() - began)
        docker_cli = shutil.which("docker")
        if docker_cli:
            for _ in range(args.calls):
                began = time.perf_counter()
                subprocess.run(
                    [docker_cli, "exec", "-u", "1000", str(sandbox.container_id), "true"], check=True
                )
                cli.append(time.perf_counter() - began)
        container = engine.client.containers.get(sandbox.container_id)
        for _ in range(args.calls):
            began = time.perf_counter()
            container.exec_run(["true"], user="1000")
            sdk.append(time.perf_counter() - began)
    finally:
        await sandbox.stop()

    print(f"sandbox overhead on image {args.image}")
    line("no-op tool call, our channel (true)", ours_bare)
    line("  host subprocess spawn (true)", host_bare)
    line("no-op tool call, our channel (bash -c true)", ours_bash)
    line("  host subprocess spawn (bash -c true)", host_bash)
    for label, ours, host in (("true", ours_bare, host_bare), ("bash -c true", ours_bash, host_bash)):
        print(f"{'ratio to host, ' + label:<44} p50 {pct(ours, 0.5) / pct(host, 0.5):7.2f} x")
    if cli:
        line("no-op via `docker exec` command line", cli)
    line("no-op via SDK exec_run (fresh exec)", sdk)
    print(
        f"{'start-to-ready, cached image':<44} p50 {statistics.median(starts) * 1000:7.1f} ms   "
        f"min {min(starts) * 1000:7.1f} ms   max {max(starts) * 1000:7.1f} ms   (n={len(starts)})"
    )


if __name__ == "__main__":
    asyncio.run(main())
