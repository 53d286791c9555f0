"""The aide agent's solution tree as recorded: one `aide_node` event per node, and the note
naming the node put back at the end. `rebench attempts show` prints it, `rebench report
--tree ID` draws it into report.html."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rebench.agents.aide import BEST_NOTE
from rebench.errors import RebenchError
from rebench.literal import html_literal
from rebench.store.models import Attempt, Event


@dataclass(frozen=True)
class TreeNode:
    node: int
    parent: int | None
    step: str
    buggy: bool
    metric: float | None
    score: float | None
    score_valid: bool | None
    exit_code: int | None
    timed_out: bool
    summary: str
    plan: str
    diff: str
    output_tail: str
    run_command: str | None
    working_s: float


@dataclass(frozen=True)
class SolutionTree:
    attempt_id: int
    agent: str
    environment: str
    nodes: list[TreeNode]
    best: int | None
    """The node the agent put back at the end (None: none working, or it did not get that far)."""

    def children(self, parent: int | None) -> list[TreeNode]:
        return [n for n in self.nodes if n.parent == parent]

    def as_json(self) -> dict[str, Any]:
        return {"best": self.best, "nodes": [vars(n) for n in self.nodes]}


def tree_from_events(attempt_id: int, agent: str, environment: str,
                     events: Iterable[tuple[str, dict[str, Any], float]]) -> SolutionTree:
    """The tree from (kind, data, working_s) rows in their order."""
    nodes: list[TreeNode] = []
    best: int | None = None
    for kind, data, working_s in events:
        if kind == "aide_node":
            nodes.append(TreeNode(
                node=data["node"], parent=data.get("parent"), step=data["step"], buggy=data["buggy"],
                metric=data.get("metric"), score=data.get("score"), score_valid=data.get("score_valid"),
                exit_code=data.get("exit_code"), timed_out=bool(data.get("timed_out")),
                summary=data.get("summary", ""), plan=data.get("plan", ""), diff=data.get("diff", ""),
                output_tail=data.get("output_tail", ""), run_command=data.get("run_command"),
                working_s=working_s))
        elif kind == "note" and data.get("message") == BEST_NOTE:
            best = (data.get("data") or {}).get("node")
    return SolutionTree(attempt_id, agent, environment, nodes, best)


def load_tree(session: Session, attempt_id: int) -> SolutionTree:
    """One attempt's tree; an unknown attempt, or one without tree nodes, is a one-line error."""
    attempt = session.get(Attempt, attempt_id)
    if attempt is None:
        raise RebenchError(f"no attempt with id {attempt_id}")
    rows = session.scalars(select(Event).where(Event.attempt_id == attempt_id, Event.kind.in_(("aide_node", "note")))
                           .order_by(Event.seq))
    tree = tree_from_events(attempt_id, attempt.agent, attempt.environment,
                            ((str(e.kind), e.data, e.working_s) for e in rows))
    if not tree.nodes:
        raise RebenchError(f"attempt {attempt_id} ({attempt.agent}) has no solution tree: only the aide agent "
                           "records one")
    return tree


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def node_label(node: TreeNode, best: int | None) -> str:
    """One line per node: id, step, outcome, metric, and the review's summary."""
    if node.timed_out:
        ran = "timed out, "
    elif node.exit_code not in (None, 0):
        ran = f"exit {node.exit_code}, "
    else:
        ran = ""
    scored = {None: "", True: "score valid, ", False: "score invalid, "}[node.score_valid]
    state = "buggy" if node.buggy else f"metric {_num(node.metric)}"
    mark = "  <- best, restored" if node.node == best else ""
    summary = node.summary.strip().splitlines()[0] if node.summary.strip() else ""
    return f"{node.node} {node.step}: {ran}{scored}{state}{mark}" + (f" - {summary}" if summary else "")


def tree_lines(tree: SolutionTree) -> list[str]:
    """The tree drawn in text, children under their parent."""
    lines: list[str] = []

    def walk(parent: int | None, prefix: str) -> None:
        kids = tree.children(parent)
        for index, node in enumerate(kids):
            last = index == len(kids) - 1
            lines.append(prefix + ("└── " if last else "├── ") + node_label(node, tree.best))
            walk(node.node, prefix + ("    " if last else "│   "))

    walk(None, "")
    return lines


def tree_html(tree: SolutionTree) -> str:
    """Nested lists, each node with its plan, diff and output folded under it."""

    def walk(parent: int | None) -> str:
        kids = tree.children(parent)
        if not kids:
            return ""
        items = []
        for node in kids:
            css = "buggy" if node.buggy else ("best" if node.node == tree.best else "good")
            folded = "".join(
                f"<details><summary>{title}</summary><pre>{html_literal(text)}</pre></details>"
                for title, text in (("plan", node.plan), ("diff", node.diff),
                                    ("run: " + html_literal(node.run_command or ""), node.output_tail))
                if text)
            items.append(f"<li class='{css}'><span>{html_literal(node_label(node, tree.best))}</span>"
                         f"{folded}{walk(node.node)}</li>")
        return "<ul>" + "".join(items) + "</ul>"

    title = f"Solution tree of attempt {tree.attempt_id} ({tree.agent} on {tree.environment})"
    return f"<h2>{html_literal(title)}</h2><div class='tree'>{walk(None)}</div>"
