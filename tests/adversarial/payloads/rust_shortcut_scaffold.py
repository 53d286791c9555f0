"""A `solve_code_contests_rust.py` that never calls the model: it writes the Rust itself from
what the validation split shows (test_rust_shortcuts.py copies it into a solution folder).

It stands for an agent that read every validation problem of the `tiny` profile, recognised the
sentence that states its operation (a template with the constants left open) and wrote a
handler for it: the program, and the same computation in Python. `handlers.json` beside this
file lists those templates, built by the test from the validation split alone; the handlers'
code is the generator's own (copied beside this file as `problem_generator.py`), of which only
the listed operations and wordings are used. The strongest such scaffold is the one that knows
the visible templates perfectly, so a failure here is not for want of careful reading.

Modes (`mode` in handlers.json):
- "template": a hidden statement containing a visible template's sentence (constants as
  wildcards) gets that handler's program with the constants read off the statement.
- "search": as "template"; otherwise every handler for the problem's input format is tried
  with the statement's numbers (and every letter) as its constants, in Python, on the public
  tests, and the first that passes them all gives the program.
Anything else gets "" (no program): a program that fails a public test cannot solve the
problem, since the public tests are among those it is judged on, so returning a guess would
not raise the score.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import re
import string
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("problem_generator", HERE / "problem_generator.py")
assert _spec is not None and _spec.loader is not None
generator = importlib.util.module_from_spec(_spec)
sys.modules["problem_generator"] = generator  # its dataclasses look their module up there
_spec.loader.exec_module(generator)

TABLE: dict[str, Any] = json.loads((HERE / "handlers.json").read_text())
MODE: str = TABLE["mode"]
OPS = {(op.family, op.name): op for op in generator._OPS if [op.family, op.name] in TABLE["ops"]}
INPUT_LINES: dict[str, str] = TABLE["input_lines"]  # family -> its input section, as seen


def _pattern(wording: str) -> re.Pattern[str]:
    """The template as a regex: {k} and {b} stand for integers, {c} for a letter."""
    text = re.escape(wording)
    seen: set[str] = set()
    for field, group in (("k", r"-?\d+"), ("b", r"-?\d+"), ("c", r"[a-z]")):
        token = re.escape("{" + field + "}")
        while token in text:
            text = text.replace(token, f"(?P={field})" if field in seen else f"(?P<{field}>{group})", 1)
            seen.add(field)
    return re.compile(text)


TEMPLATES = [(OPS[(family, name)], _pattern(wording)) for family, name, wording in TABLE["templates"]]


def _families(description: str) -> list[str]:
    return [family for family, line in INPUT_LINES.items() if line in description]


def _program(op: Any, k: int = 0, b: int = 0, c: str = "") -> str:
    return str(generator._solution(op, k, b, c))


def by_template(description: str) -> str:
    families = _families(description)
    for op, pattern in TEMPLATES:
        found = pattern.search(description)
        if found and op.family in families:
            groups = found.groupdict()
            return _program(op, int(groups.get("k") or 0), int(groups.get("b") or 0), groups.get("c") or "")
    return ""


def _values(family: str, given: str) -> list[Any] | None:
    words = given.split()
    try:
        if family == "string":
            return words[:1] if len(words) == 1 else None
        numbers = [int(word) for word in words]
    except ValueError:
        return None
    if family in ("array", "map"):
        return numbers[1:] if numbers and numbers[0] == len(numbers) - 1 else None
    want = {"pair": 2, "single": 1}[family]
    return numbers if len(numbers) == want else None


def _constants(op: Any, description: str) -> list[tuple[int, int, str]]:
    numbers = list(dict.fromkeys(int(n) for n in re.findall(r"-?\d+", description))) or [0]
    ks = numbers if "k" in op.consts else [0]
    bs = numbers if "b" in op.consts else [0]
    cs = list(string.ascii_lowercase) if "c" in op.consts else [""]
    return list(itertools.product(ks, bs, cs))


def _passes(op: Any, k: int, b: int, c: str, tests: dict[str, list[str]]) -> bool:
    for given, expected in zip(tests["input"], tests["output"], strict=True):
        values = _values(op.family, given)
        try:
            if values is None or op.oracle(values, k, b, c).split() != expected.split():
                return False
        except (ZeroDivisionError, ValueError, IndexError):
            return False
    return True


def by_search(problem: dict[str, Any]) -> str:
    families = _families(problem["description"])
    for op in OPS.values():
        if op.family not in families:
            continue
        for k, b, c in _constants(op, problem["description"]):
            if _passes(op, k, b, c, problem["public_tests"]):
                return _program(op, k, b, c)
    return ""


async def generate_solution(client: Any, semaphore: asyncio.Semaphore, problem: dict[str, Any]) -> str:
    program = by_template(problem["description"])
    if not program and MODE == "search":
        program = by_search(problem)
    return program
