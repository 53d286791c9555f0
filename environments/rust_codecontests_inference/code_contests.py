"""RE-Bench's "easy" CodeContests problems, chosen from the dataset's own fields at build time.

`is_easy(problem)` reads CodeContests' `difficulty` field (the dataset's `Difficulty` enum:
0 UNKNOWN_DIFFICULTY, 1 EASY, 2 MEDIUM, 3 HARD, 4 HARDER, 5 HARDEST, 6 EXTERNAL, then 7 A,
8 B, ... 28 V for the problem's letter in a Codeforces round). A problem is easy at the lowest
level of either scale: EASY (sites that grade by name) or A (the first problem of a round).
METR's evaluate.py takes `easy: bool` and filters at run time; its predicate is not in the
reference material this was written from, so this is the closest rule the dataset's fields
document. The manifest (names and counts per split) pins the result: a build whose filtered
problems differ from the pinned manifest stops.

Standard library only: build.py and the tests import it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DIFFICULTY_EASY = 1
DIFFICULTY_A = 7
EASY_LEVELS = frozenset({DIFFICULTY_EASY, DIFFICULTY_A})
FILTER_TEXT = "difficulty in {1 (EASY), 7 (A)}"


def is_easy(problem: Mapping[str, Any]) -> bool:
    """True for a problem whose CodeContests `difficulty` is EASY or A."""
    level = problem.get("difficulty")
    return isinstance(level, int) and not isinstance(level, bool) and level in EASY_LEVELS


def easy(problems: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [problem for problem in problems if is_easy(problem)]


def manifest(splits: Mapping[str, Sequence[Mapping[str, Any]]], filtered: Iterable[str]) -> dict[str, Any]:
    """What the build kept: per split, whether the filter ran, the count and the problems' names."""
    chosen = set(filtered)
    return {
        "filter": FILTER_TEXT,
        "splits": {name: {"easy_filter": name in chosen, "count": len(problems),
                          "names": [str(problem["name"]) for problem in problems]}
                   for name, problems in sorted(splits.items())},
    }


def manifest_bytes(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()


def manifest_sha256(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(manifest_bytes(record)).hexdigest()


def check(record: Mapping[str, Any], *, pinned_sha256: str, expected_counts: Mapping[str, int]) -> str | None:
    """None when the manifest matches the pins, else the one-line reason it does not."""
    for split, expected in sorted(expected_counts.items()):
        got = record["splits"].get(split, {}).get("count")
        if got != expected:
            return (f"asset code_contests: the {split} split has {got} problems after the filter "
                    f"({FILTER_TEXT}), RE-Bench's has {expected}; the files or the filter differ from METR's")
    digest = manifest_sha256(record)
    if pinned_sha256 != "unpinned" and digest != pinned_sha256:
        return (f"asset code_contests: the problems kept ({FILTER_TEXT}) have manifest sha256 {digest}, "
                f"pinned {pinned_sha256}; the files or the filter differ from the pinned ones")
    return None
