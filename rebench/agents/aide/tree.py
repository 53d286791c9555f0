"""The search tree: every node a complete candidate solution, and AIDE's policy for the next step.

Policy (AIDE's): write `num_drafts` drafts first; then, with probability `debug_prob`, debug a
buggy leaf whose debug chain is shorter than `max_debug_depth`; otherwise improve the best
working node (or, with probability `explore_prob`, a random working one). With no working
node yet, draft again.
"""

from __future__ import annotations

import difflib
import random
from typing import Literal

from pydantic import BaseModel, Field

from rebench.agents.aide.settings import AideSettings

Step = Literal["draft", "debug", "improve"]


class Node(BaseModel):
    id: int
    parent: int | None
    step: Step
    plan: str
    files: dict[str, str] = Field(default_factory=dict)
    """Every file this node sets, whole (its parent's, with the reply's files laid over them)."""
    run_command: str | None = None
    exit_code: int | None = None
    timed_out: bool = False
    output: str = ""
    score: float | None = None
    """The environment's raw score, where it is shown and valid."""
    score_valid: bool | None = None
    """None: not scored."""
    metric: float | None = None
    """What ranks the node (the score, or the agent's own validation metric)."""
    buggy: bool = True
    summary: str = ""
    debug_depth: int = 0


class Tree:
    def __init__(self, direction: Literal["lower", "higher"]) -> None:
        self.direction = direction
        self.nodes: list[Node] = []

    def add(self, node: Node) -> None:
        self.nodes.append(node)

    def get(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def children(self, node: Node) -> list[Node]:
        return [n for n in self.nodes if n.parent == node.id]

    def good(self) -> list[Node]:
        return [n for n in self.nodes if not n.buggy and n.metric is not None]

    def best(self) -> Node | None:
        """The best working node; the earliest one on a tie (it has been scored longest)."""
        good = self.good()
        if not good:
            return None
        sign = 1.0 if self.direction == "lower" else -1.0
        return min(good, key=lambda n: (sign * (n.metric or 0.0), n.id))

    def next_step(self, settings: AideSettings, rng: random.Random) -> tuple[Step, Node | None]:
        drafts = sum(1 for n in self.nodes if n.step == "draft")
        if drafts < settings.num_drafts:
            return "draft", None
        if rng.random() < settings.debug_prob:
            debuggable = [n for n in self.nodes if n.buggy and not self.children(n)
                          and n.debug_depth < settings.max_debug_depth]
            if debuggable:
                return "debug", rng.choice(debuggable)
        good = self.good()
        if not good:
            return "draft", None
        if rng.random() < settings.explore_prob:
            return "improve", rng.choice(good)
        return "improve", self.best()


def diff(before: dict[str, str], after: dict[str, str]) -> str:
    """A unified diff of the files a node changed against what it started from."""
    parts: list[str] = []
    for path in sorted(after):
        old, new = before.get(path, ""), after[path]
        if old == new:
            continue
        parts.extend(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                          fromfile=f"a/{path}", tofile=f"b/{path}"))
    return "".join(line if line.endswith("\n") else line + "\n" for line in parts)
