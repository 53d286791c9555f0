"""`rebench report`: environment x agent x per-attempt budget, with n, mean and best normalized score.

Normalized scores of own attempts are computed here from the stored raw score and
the anchors in force (calibrated for this hardware when they exist).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from rich.table import Table
from sqlalchemy import select

from rebench.budget import format_duration
from rebench.calibration import resolve_anchors
from rebench.cli.common import DbOption, JsonOption, console, fmt, open_store, print_json
from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.scoring.normalize import normalize
from rebench.store.db import Store
from rebench.store.models import FINISHED_STATUSES, Attempt

SUMMARY_COLUMNS = ("environment", "agent", "budget", "n", "mean", "best", "anchors")


def normalized_scores(store: Store) -> list[dict[str, Any]]:
    """One row per finished, counted attempt with its normalized score recomputed from raw."""
    registry = EnvironmentRegistry()
    known = set(registry.names())
    anchors_cache: dict[tuple[str, str], Any] = {}
    rows = []
    with store.session() as session:
        attempts = list(session.scalars(select(Attempt).where(
            Attempt.status.in_(FINISHED_STATUSES), Attempt.counted.is_(True))))
        for a in attempts:
            if a.source == "own" and a.environment in known and a.status != "interrupted":
                key = (a.environment, a.profile)
                if key not in anchors_cache:
                    anchors_cache[key] = resolve_anchors(store, registry.get(a.environment), a.profile)
                anchors = anchors_cache[key]
                score, kind = normalize(a.final_raw, anchors.start, anchors.reference), anchors.kind
            elif a.source == "imported":
                score, kind = a.final_normalized or 0.0, "imported"
            else:
                continue
            rows.append({"environment": a.environment, "agent": a.agent if not a.model else f"{a.agent}/{a.model}",
                         "budget_s": a.budget_s, "score": score, "anchors": kind, "source": a.source})
    return rows


def summary_rows(store: Store) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = defaultdict(list)
    for row in normalized_scores(store):
        groups[(row["environment"], row["agent"], row["budget_s"])].append(row)
    out = []
    for (environment, agent, budget_s), rows in sorted(groups.items()):
        scores = [r["score"] for r in rows]
        out.append({
            "environment": environment, "agent": agent, "budget": format_duration(budget_s),
            "budget_s": budget_s, "n": len(scores), "mean": statistics.fmean(scores), "best": max(scores),
            "anchors": ",".join(sorted({r["anchors"] for r in rows})),
        })
    return out


def report_command(db: DbOption = None, json_output: JsonOption = False) -> None:
    """Normalized scores by environment, agent and per-attempt budget."""
    store = open_store(db)
    rows = summary_rows(store)
    if json_output:
        print_json(rows)
        return
    if not rows:
        raise RebenchError("no finished attempts in the database yet; run `rebench run ...` first")
    table = Table(title="Normalized score (0 = starting solution, 1 = reference solution)")
    for column in SUMMARY_COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(row["environment"], row["agent"], row["budget"], str(row["n"]), fmt(row["mean"]),
                      fmt(row["best"]), row["anchors"])
    console.print(table)
