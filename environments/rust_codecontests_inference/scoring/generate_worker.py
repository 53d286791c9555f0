"""Runs the agent's `solve_code_contests_rust.py` for the scorer, in a confined process.

score.py starts this file's source with `python -c` under the helper's confinement (as the
`subject` user where the backend allows, with /protected closed by Landlock), so the agent's
code never runs in the process that holds the hidden tests. This process receives the problems
without their hidden tests and solutions, the gateway's address and the scorer's token, calls
`generate_solution(client, semaphore, problem)` for each problem in timed batches, and sends the
returned programs back as JSON.

    python -c SOURCE READ_FD WRITE_FD SOLUTION_DIR

In: {"harness_source", "problems", "base_url", "api_key", "concurrency", "batch_size",
"batch_timeout_s", "budget_s", "request_timeout_s"}. Out: {"programs": [...], "errors": [...]} or {"error": ...}.
"""

import asyncio
import sys
import traceback
import types

from rebench.kit.confined import Channel, import_file


def main():
    channel = Channel(sys.argv)
    request = channel.receive()
    harness = types.ModuleType("rust_eval_scorer")
    exec(compile(request["harness_source"], "rust_eval.py", "exec"), harness.__dict__)
    try:
        from openai import AsyncOpenAI

        module = import_file(channel.args[0], "solve_code_contests_rust.py", "solve_code_contests_rust")
        generate = getattr(module, "generate_solution", None)
        if generate is None:
            raise AttributeError("solve_code_contests_rust.py defines no generate_solution")
        client = AsyncOpenAI(base_url=request["base_url"], api_key=request["api_key"],
                             timeout=request["request_timeout_s"], max_retries=2)
        programs, errors = asyncio.run(harness.generate_all(
            generate, client, request["problems"], concurrency=request["concurrency"],
            batch_size=request["batch_size"], batch_timeout_s=request["batch_timeout_s"],
            budget_s=request["budget_s"]))
    except BaseException as exc:  # the agent's module is broken: say why, briefly
        channel.send({"error": f"{type(exc).__name__}: {exc}"[:600], "traceback": traceback.format_exc()[-3000:]})
        return
    channel.send({"programs": programs, "errors": errors})


main()
