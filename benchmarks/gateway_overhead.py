"""What the model gateway adds to a request and to each streamed chunk, against calling the model server
directly, side by side in one run.

The upstream is tests/fake_model_server.py (an OpenAI-compatible server, in a process of its own); the
gateway (rebench.gateway.GatewayServer, with a real SQLite store for its rows) runs in another process in
front of it; this process is the client (httpx2, keep-alive, as the SDKs use it). Requests alternate
between the two routes so that load on the machine hits both alike.

- per request: N short chat completions each way; p50 and p99 latency, and their difference;
- per chunk: R streamed completions of C chunks each way; the median stream time, and the difference
  divided by C.

Goals: at most 2 ms added per request (p50), at most 0.2 ms per streamed chunk.

    python -m benchmarks.gateway_overhead [--requests 400] [--streams 15] [--chunks 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parents[1]
BODY = {"model": "bench", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}


def start_fake(folder: Path, step: Mapping[str, object]) -> tuple[subprocess.Popen[str], str]:
    script = folder / f"script-{time.time_ns()}.json"
    script.write_text(json.dumps([step]))
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_model_server.py"), "--port", "0",
                                "--script", str(script), "--repeat"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()  # "fake model server on http://127.0.0.1:PORT (OpenAI base URL ...)"
    return process, line.split(" on ", 1)[1].split(" ", 1)[0] + "/v1"


def start_gateway(upstream_url: str, folder: Path) -> tuple[subprocess.Popen[str], str, str]:
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.gateway_overhead", "--serve", upstream_url,
                                "--db", str(folder / f"gw-{time.time_ns()}.db")], cwd=ROOT, stdout=subprocess.PIPE,
                               stdin=subprocess.PIPE, text=True)
    assert process.stdout is not None
    port, token = process.stdout.readline().split()
    return process, f"http://127.0.0.1:{port}/v1", token


async def serve(upstream_url: str, db: str) -> None:
    """The gateway process: serve until stdin closes."""
    sys.path.insert(0, str(ROOT))
    from rebench.environments.metadata import Gateway
    from rebench.gateway import GatewayServer, upstream_price
    from rebench.gateway.upstream_http import OpenAIWireUpstream
    from rebench.store.db import Store
    from rebench.store.models import Attempt

    store = Store(Path(db))
    with store.session() as session:
        attempt = Attempt(environment="bench", profile="tiny", agent="bench", budget_s=60.0)
        session.add(attempt)
        session.flush()
        attempt_id = attempt.id
    config = Gateway(model="bench", upstream="openai-compatible/served", base_url=upstream_url, max_tokens=4096,
                     concurrency=8, timeout_s=60)
    server = GatewayServer(config, OpenAIWireUpstream("openai-compatible", "served", upstream_url, 60), store=store,
                           attempt_id=attempt_id, price=upstream_price(config))
    port = await server.start_tcp()
    print(port, server.meters["agent"].token, flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await server.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_requests(client: httpx2.Client, routes: dict[str, tuple[str, str]], count: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in routes}
    for i in range(count + 20):
        for name, (url, token) in routes.items():
            started = time.perf_counter()
            answer = client.post(url + "/chat/completions", json=BODY, headers={"Authorization": f"Bearer {token}"})
            elapsed = time.perf_counter() - started
            assert answer.status_code == 200, answer.text
            if i >= 20:  # warm-up: connections, imports, caches
                times[name].append(elapsed)
    return times


def timed_streams(client: httpx2.Client, routes: dict[str, tuple[str, str]], count: int,
                  chunks: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in routes}
    for i in range(count + 2):
        for name, (url, token) in routes.items():
            started = time.perf_counter()
            seen = 0
            with client.stream("POST", url + "/chat/completions", json={**BODY, "stream": True},
                               headers={"Authorization": f"Bearer {token}"}) as answer:
                for event in httpx2.EventSource(answer):
                    seen += event.data != "[DONE]"
            elapsed = time.perf_counter() - started
            assert seen >= chunks, (name, seen)
            if i >= 2:
                times[name].append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--streams", type=int, default=15)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.db))
        return
    processes: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory() as folder:
        try:
            short_step = {"text": "ok", "usage": {"input_tokens": 5, "output_tokens": 1}}
            short, short_url = start_fake(Path(folder), short_step)
            long, long_url = start_fake(Path(folder), {"text": "x" * args.chunks, "chunks": args.chunks})
            processes += [short, long]
            gateway_short, short_gw, token = start_gateway(short_url, Path(folder))
            gateway_long, long_gw, long_token = start_gateway(long_url, Path(folder))
            processes += [gateway_short, gateway_long]
            with httpx2.Client(timeout=60) as client:
                requests = timed_requests(client, {"direct": (short_url, "none"), "gateway": (short_gw, token)},
                                          args.requests)
                streams = timed_streams(client, {"direct": (long_url, "none"), "gateway": (long_gw, long_token)},
                                        args.streams, args.chunks)
        finally:
            for process in processes:
                if process.stdin:
                    process.stdin.close()  # a gateway: closes (its rows written) and exits
                else:
                    process.terminate()  # a fake model server
            for process in processes:
                process.wait(timeout=30)
    print(f"per request ({args.requests} short chat completions each way, ms)")
    print(f"  {'':10}{'p50':>8}{'p99':>8}")
    for name, values in requests.items():
        print(f"  {name:10}{percentile(values, 0.5) * 1e3:8.2f}{percentile(values, 0.99) * 1e3:8.2f}")
    added_p50 = (percentile(requests["gateway"], 0.5) - percentile(requests["direct"], 0.5)) * 1e3
    added_p99 = (percentile(requests["gateway"], 0.99) - percentile(requests["direct"], 0.99)) * 1e3
    print(f"  {'added':10}{added_p50:8.2f}{added_p99:8.2f}   (goal: p50 <= 2 ms)")
    direct, through = statistics.median(streams["direct"]), statistics.median(streams["gateway"])
    print(f"per streamed chunk ({args.streams} streams of {args.chunks} chunks each way)")
    print(f"  direct  {direct * 1e3:8.1f} ms a stream, {direct / args.chunks * 1e3:.3f} ms a chunk")
    print(f"  gateway {through * 1e3:8.1f} ms a stream, {through / args.chunks * 1e3:.3f} ms a chunk")
    print(f"  added   {(through - direct) / args.chunks * 1e3:.3f} ms a chunk   (goal: <= 0.2 ms)")


if __name__ == "__main__":
    main()
