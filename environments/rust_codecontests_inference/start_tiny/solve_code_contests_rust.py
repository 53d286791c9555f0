"""The starting solution: one completion per problem, its first Rust code block, no checking.

The scorer (and evaluate.py) calls `generate_solution(client, semaphore, problem)` once per
problem; it must return the source of a Rust program (edition 2018) that reads the input from
stdin and writes the answer to stdout.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openai import AsyncOpenAI

_model: str | None = None


async def model_name(client: AsyncOpenAI) -> str:
    """The one model the gateway serves."""
    global _model
    if _model is None:
        _model = (await client.models.list()).data[0].id
    return _model


def extract_rust(text: str) -> str:
    """The first ```rust block of a reply, else the reply itself."""
    if "```" in text:
        parts = text.split("```")
        for block in parts[1::2]:
            first, _, body = block.partition("\n")
            if first.strip().lower() in ("rust", "rs", ""):
                return body
    return text


async def generate_solution(client: AsyncOpenAI, semaphore: asyncio.Semaphore, problem: dict[str, Any]) -> str:
    prompt = ("Write a Rust program (edition 2018) that solves this problem.\n"
              f"<problem>\n{problem['description']}\n</problem>")
    async with semaphore:
        reply = await client.chat.completions.create(
            model=await model_name(client), messages=[{"role": "user", "content": prompt}],
            temperature=1.0, max_tokens=1024)
    return extract_rust(reply.choices[0].message.content or "")
