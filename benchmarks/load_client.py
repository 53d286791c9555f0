"""The model client of benchmarks/load.py's agent, in a process of its own, as an installed agent's
client is (in its container): what it spends parsing its streams is the agent's, not the harness's.

Reads one line per call on stdin (`go`), makes one streamed Messages call through the attempt's
gateway socket, and answers one line on stdout: the call's milliseconds, or `error ...`.

    python -m benchmarks.load_client SOCKET TOKEN MODEL
"""

from __future__ import annotations

import asyncio
import sys
import time

import httpx2

PROMPT = "Say fifty words."


async def main(socket_path: str, token: str, model: str) -> None:
    transport = httpx2.AsyncHTTPTransport(uds=socket_path)
    headers = {"x-api-key": token, "anthropic-version": "2023-06-01"}
    body = {"model": model, "max_tokens": 128, "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    loop = asyncio.get_running_loop()
    async with httpx2.AsyncClient(transport=transport, base_url="http://gateway", headers=headers,
                                  timeout=120) as client:
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "go":
            started = time.perf_counter()
            try:
                async with client.stream("POST", "/v1/messages", json=body) as reply:
                    if reply.status_code != 200:
                        raise RuntimeError(f"gateway answered {reply.status_code}: {(await reply.aread())[:300]!r}")
                    async for _ in reply.aiter_lines():
                        pass
                answer = f"{(time.perf_counter() - started) * 1000:.3f}"
            except Exception as exc:  # the agent turns it into its failure
                answer = f"error {type(exc).__name__}: {exc}".replace("\n", " ")
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
