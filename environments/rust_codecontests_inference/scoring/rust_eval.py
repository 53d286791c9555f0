"""The evaluation harness of the Rust CodeContests task (stdlib only).

One copy runs in the scorer (/protected/scoring) and the same file is in the agent's workspace
(`rust_eval.py`, used by evaluate.py and free to import from a solution), so the agent filters
and evaluates exactly as it is scored:

- a program is compiled with `rustc --edition 2018` (COMPILE_TIMEOUT_S),
- it runs on each test input with a TEST_TIMEOUT_S wall-clock limit and a memory limit,
- it passes a test when its output equals the expected one token by token (whitespace-insensitive),
- a problem is solved when its program passes every test (public, private and generated).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

TEST_TIMEOUT_S = 2.0
COMPILE_TIMEOUT_S = 60.0
MEMORY_BYTES = 1 << 30
OUTPUT_CAP_BYTES = 1 << 20
RUSTC = ["rustc", "--edition", "2018"]
HIDDEN_KEYS = ("private_tests", "generated_tests", "solution", "solutions", "incorrect_solutions")
"""What a solution never sees of a problem: the tests it is judged on beyond the public ones, and answers."""


def public_view(problem: dict[str, Any]) -> dict[str, Any]:
    """The problem as `generate_solution` receives it: everything but hidden tests and solutions."""
    return {key: value for key, value in problem.items() if key not in HIDDEN_KEYS}


def tests_of(problem: dict[str, Any], kinds: Sequence[str] = ("public_tests", "private_tests", "generated_tests")
             ) -> list[tuple[str, str]]:
    """(input, expected output) pairs of the given kinds, in order."""
    pairs: list[tuple[str, str]] = []
    for kind in kinds:
        block = problem.get(kind) or {}
        pairs.extend(zip(block.get("input", []), block.get("output", []), strict=False))
    return pairs


def outputs_match(actual: str, expected: str) -> bool:
    return actual.split() == expected.split()


_RUST_BLOCK = re.compile(r"```(?:rust|rs)[^\n]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_ANY_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


def extract_rust(text: str) -> list[str]:
    """The Rust programs in a completion: its ```rust blocks, else any fenced blocks, else the
    whole text when it looks like a program (has `fn main`)."""
    blocks = _RUST_BLOCK.findall(text) or _ANY_BLOCK.findall(text)
    if blocks:
        return [block.strip() + "\n" for block in blocks if block.strip()]
    return [text.strip() + "\n"] if "fn main" in text else []


def _limits(memory_bytes: int | None) -> Callable[[], None] | None:
    if memory_bytes is None:
        return None

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _run(argv: list[str], stdin: str, timeout_s: float, cwd: str, memory_bytes: int | None
         ) -> tuple[str, int | None, str]:
    """Run argv in its own process group; ("ok" | "error" | "timeout", exit code, output)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=_limits(memory_bytes))
    try:
        out, err = proc.communicate(stdin.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", None, ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the program left behind
    text = (out[:OUTPUT_CAP_BYTES] if proc.returncode == 0 else err[-2000:]).decode("utf-8", errors="replace")
    return ("ok" if proc.returncode == 0 else "error"), proc.returncode, text


def run_program(source: str, inputs: Sequence[str], *, test_timeout_s: float = TEST_TIMEOUT_S,
                memory_bytes: int | None = MEMORY_BYTES, stop_early: bool = True) -> dict[str, Any]:
    """Compile `source` and run it on each input: {"compiled": bool, "error": str,
    "runs": [{"status": "ok" | "error" | "timeout", "stdout": str}]}. With `stop_early`, runs
    stop after the first one that fails to exit normally (the program has failed anyway)."""
    folder = tempfile.mkdtemp(prefix="rust-eval-")
    try:
        with open(os.path.join(folder, "main.rs"), "w", encoding="utf-8") as handle:
            handle.write(source)
        status, _, output = _run([*RUSTC, "-o", "main", "main.rs"], "", COMPILE_TIMEOUT_S, folder, None)
        binary = os.path.join(folder, "main")
        if status != "ok" or not os.path.exists(binary):
            return {"compiled": False, "error": f"compilation {status}: {output[-600:]}", "runs": []}
        runs = []
        for stdin in inputs:
            status, _, output = _run([binary], stdin, test_timeout_s, folder, memory_bytes)
            runs.append({"status": status, "stdout": output if status == "ok" else ""})
            if stop_early and status != "ok":
                break
        return {"compiled": True, "error": "", "runs": runs}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def passes(result: dict[str, Any], expected: Sequence[str]) -> bool:
    """Whether a run_program result passes every test whose expected outputs are `expected`."""
    runs = result.get("runs", [])
    return bool(result.get("compiled")) and len(runs) == len(expected) and all(
        run["status"] == "ok" and outputs_match(run["stdout"], want) for run, want in zip(runs, expected, strict=True))


def check(source: str, tests: Sequence[tuple[str, str]], **kwargs: Any) -> bool:
    """Whether `source` compiles and passes all `tests` ((input, output) pairs), in this process's
    own confinement (what a solution uses to filter its candidates on the public tests)."""
    result = run_program(source, [stdin for stdin, _ in tests], **kwargs)
    return passes(result, [want for _, want in tests])


def standard_error(successes: int, n: int) -> float:
    if n == 0:
        return 0.0
    p = successes / n
    return math.sqrt(p * (1 - p) / n)


def summary(solved: Iterable[bool]) -> dict[str, Any]:
    flags = list(solved)
    n, k = len(flags), sum(flags)
    return {"n_successes": k, "n_problems": n, "score": k / n if n else 0.0, "standard_error": standard_error(k, n)}


async def generate_all(generate_solution: Callable[..., Any], client: Any, problems: Sequence[dict[str, Any]], *,
                       concurrency: int, batch_size: int, batch_timeout_s: float,
                       budget_s: float | None = None) -> tuple[list[str], list[str]]:
    """Call the solution's `generate_solution(client, semaphore, problem)` for every problem, in
    batches of `batch_size` run concurrently with `batch_timeout_s` per batch (a call still
    running then gets no program), and no batch starts after `budget_s` in all. Returns
    (programs, errors), "" where none came back."""
    semaphore = asyncio.Semaphore(concurrency)
    loop = asyncio.get_running_loop()
    deadline = None if budget_s is None else loop.time() + budget_s
    programs, errors = [""] * len(problems), [""] * len(problems)

    async def one(index: int) -> None:
        try:
            result = await generate_solution(client, semaphore, public_view(problems[index]))
        except Exception as exc:  # one broken call fails its problem only
            errors[index] = f"{type(exc).__name__}: {exc}"[:300]
            return
        if isinstance(result, str):
            programs[index] = result
        else:
            errors[index] = f"generate_solution returned {type(result).__name__}, not str"

    for start in range(0, len(problems), batch_size):
        if deadline is not None and loop.time() >= deadline:
            for index in range(start, len(problems)):
                errors[index] = f"not started: the {budget_s:g} s for generation were spent"
            break
        timeout = batch_timeout_s if deadline is None else min(batch_timeout_s, max(deadline - loop.time(), 0.1))
        tasks = [asyncio.ensure_future(one(i)) for i in range(start, min(start + batch_size, len(problems)))]
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        for index, task in zip(range(start, start + len(tasks)), tasks, strict=True):
            if task in pending:
                errors[index] = f"no program within the batch's {timeout:g} s"
        if pending:
            await asyncio.wait(pending, timeout=5)
    return programs, errors


def read_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines (api.env, gateway.env)."""
    values: dict[str, str] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                values[key.strip().removeprefix("export ").strip()] = value.strip().strip("'\"")
    return values
