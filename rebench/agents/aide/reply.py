"""Reading the model's reply: a plan in prose, whole files as fenced code blocks, and
optionally one shell command that runs (checks, trains, prints a validation metric).

A block names its file in its first line (`# file: PATH`, or `// file:` and `-- file:`);
a single unnamed code block is the main file; an unnamed bash block is the run command.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel, Field

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
FILE_MARK = re.compile(r"^\s*(?:#|//|--|;)\s*file:\s*(\S+)\s*$", re.I)
SHELL = ("bash", "sh", "shell", "console", "zsh")


class Reply(BaseModel):
    plan: str = ""
    files: dict[str, str] = Field(default_factory=dict)
    run_command: str | None = None
    problem: str | None = None
    """Why the reply cannot be used as it is (no code, a path outside the solution folder)."""


def _safe(path: str) -> str | None:
    pure = PurePosixPath(path.strip())
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        return None
    return str(pure)


def parse_reply(text: str, main_file: str) -> Reply:
    """Plan, files and run command of one reply; `problem` says what made it unusable."""
    blocks = list(FENCE.finditer(text))
    reply = Reply(plan=(text[: blocks[0].start()] if blocks else text).strip())
    unnamed: list[str] = []
    for block in blocks:
        lang = block.group(1).strip().lower()
        body = block.group(2)
        first, _, rest = body.partition("\n")
        mark = FILE_MARK.match(first)
        if mark:
            path = _safe(mark.group(1))
            if path is None:
                reply.problem = f"file path {mark.group(1)!r} is not relative to the solution folder"
                continue
            reply.files[path] = rest
        elif lang.split(" ")[0] in SHELL:
            reply.run_command = body.strip() or None
        else:
            unnamed.append(body)
    if unnamed and main_file not in reply.files:
        reply.files[main_file] = unnamed[0]
    if not reply.files and reply.problem is None:
        reply.problem = "the reply has no code block, so there is no solution to run"
    return reply
