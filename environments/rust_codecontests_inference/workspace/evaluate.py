"""Evaluate a solution module on a split, the way the scorer does (same harness: rust_eval.py).

    python evaluate.py data/valid.jsonl solve_code_contests_rust [--api-env PATH] [--limit N]

Imports the module, calls its `generate_solution(client, semaphore, problem)` for every problem
(in batches, through the gateway named in api.env), compiles each returned program with
`rustc --edition 2018`, runs it on all of the problem's tests (2 s each) and prints
n_successes, n_problems and standard_error as JSON. Unlike the scorer it runs everything in
this process, unconfined: it is your own code.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rust_eval  # noqa: E402

BATCH_SIZE, BATCH_TIMEOUT_S, CONCURRENCY = 20, 60.0, 8


def gateway_settings(api_env: str | None) -> tuple[str, str]:
    candidates = [api_env] if api_env else [os.path.expanduser("~/api.env"), str(HERE / "api.env")]
    for path in candidates:
        if path and os.path.isfile(path):
            values = rust_eval.read_env_file(path)
            return values["OPENAI_BASE_URL"], values["OPENAI_API_KEY"]
    if os.environ.get("OPENAI_BASE_URL") and os.environ.get("OPENAI_API_KEY"):
        return os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    raise SystemExit(f"no api.env found (tried {', '.join(c for c in candidates if c)}); pass --api-env PATH")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("split", help="a .jsonl file of problems, e.g. data/valid.jsonl")
    parser.add_argument("module", help="the solution module, e.g. solve_code_contests_rust")
    parser.add_argument("--api-env", help="the gateway's api.env (default: ~/api.env)")
    parser.add_argument("--limit", type=int, help="only the first N problems")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    from openai import AsyncOpenAI

    with open(args.split, encoding="utf-8") as handle:
        problems = [json.loads(line) for line in handle if line.strip()][:args.limit]
    base_url, api_key = gateway_settings(args.api_env)
    sys.path.insert(0, os.getcwd())
    module = importlib.import_module(args.module)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=2)
    programs, errors = asyncio.run(rust_eval.generate_all(
        module.generate_solution, client, problems, concurrency=CONCURRENCY, batch_size=BATCH_SIZE,
        batch_timeout_s=BATCH_TIMEOUT_S))
    with ThreadPoolExecutor(max(1, args.workers)) as pool:
        solved = list(pool.map(lambda pair: bool(pair[0]) and rust_eval.check(pair[0], rust_eval.tests_of(pair[1])),
                               zip(programs, problems, strict=True)))
    result = rust_eval.summary(solved)
    failed_calls = [error for error in errors if error]
    print(json.dumps({key: result[key] for key in ("n_successes", "n_problems", "standard_error")}
                     | ({"generation_errors": failed_calls[:5]} if failed_calls else {})))


if __name__ == "__main__":
    main()
