"""The reference solution (RE-Bench's): best-of-n with filtering on the public tests.

For each problem it asks the model for n = 8 completions at once, extracts the ```rust blocks,
and checks every distinct program on the problem's public tests with the task's own harness
(rust_eval.py, the scorer's compile-and-run code). It repeats with fresh samples until a program
passes or `ROUNDS` rounds are spent, then chooses among the passing programs the one the model
wrote most often (ties: the first), which stands in for the paper's "let the model choose";
with none passing it returns the most frequent candidate.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import rust_eval
from openai import AsyncOpenAI

N_SAMPLES = 8
ROUNDS = 3
TEMPERATURE = 1.0
_model: str | None = None
_checks = asyncio.Semaphore(2)  # compilations at once (the scorer's machine has few cores)


async def model_name(client: AsyncOpenAI) -> str:
    global _model
    if _model is None:
        _model = (await client.models.list()).data[0].id
    return _model


def prompt_for(problem: dict[str, Any]) -> str:
    return ("Write a Rust program (edition 2018) that solves this problem.\n"
              f"<problem>\n{problem['description']}\n</problem>")


async def candidates(client: AsyncOpenAI, semaphore: asyncio.Semaphore, problem: dict[str, Any],
                     round_: int) -> list[str]:
    async with semaphore:
        reply = await client.chat.completions.create(
            model=await model_name(client), messages=[{"role": "user", "content": prompt_for(problem)}],
            n=N_SAMPLES, temperature=TEMPERATURE, max_tokens=1024, seed=round_)
    return [program for choice in reply.choices for program in rust_eval.extract_rust(choice.message.content or "")]


async def passes_public(program: str, tests: list[tuple[str, str]]) -> bool:
    async with _checks:
        return await asyncio.to_thread(rust_eval.check, program, tests)


async def generate_solution(client: AsyncOpenAI, semaphore: asyncio.Semaphore, problem: dict[str, Any]) -> str:
    tests = rust_eval.tests_of(problem, ("public_tests",))
    seen: Counter[str] = Counter()
    passing: list[str] = []
    checked: set[str] = set()
    for round_ in range(ROUNDS):
        programs = await candidates(client, semaphore, problem, round_)
        seen.update(programs)
        for program in dict.fromkeys(programs):
            if program not in checked:
                checked.add(program)
                if await passes_public(program, tests):
                    passing.append(program)
        if passing:
            break
    if passing:
        return max(passing, key=lambda program: (seen[program], -passing.index(program)))
    return seen.most_common(1)[0][0] if seen else ""
