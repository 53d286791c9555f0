"""Re-scores beside the original scores: for `attempts show` and for `report --rescored RUN`.

The report counts a run's re-scores in place of the original scores and carries the original
beside each (`original_mean`), over the same attempts: those the run re-scored. Attempts it
skipped or did not cover are left out (a note says how many), so the two columns always compare
the same attempts. The original score is the report's usual one (raw final score, anchors in
force); the re-score is normalized with the anchors the run used, as it recorded them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rebench.errors import RebenchError
from rebench.report.data import ReportData
from rebench.store.db import Store
from rebench.store.rescores import Rescore, RescoreRun, RescoreStatus


def check_run(session: Session, run_id: int) -> RescoreRun:
    run = session.get(RescoreRun, run_id)
    if run is None:
        existing = ", ".join(map(str, session.scalars(select(RescoreRun.id).order_by(RescoreRun.id)))) or "none"
        raise RebenchError(f"no rescore run {run_id} in this database; runs there: {existing}")
    return run


def use_rescores(store: Store, data: ReportData, run_id: int) -> ReportData:
    """The report's runs as re-scored by `run_id` (module docstring)."""
    with store.session() as session:
        run = check_run(session, run_id)
        rows = {r.attempt_id: r for r in session.scalars(select(Rescore).where(
            Rescore.run_id == run_id, Rescore.status == RescoreStatus.DONE))}
        described = f"{run.created_at:%Y-%m-%d %H:%M} on {run.hardware_description} ({run.backend})"
        status = run.status
    runs = []
    for record in data.runs:
        row = rows.get(record.attempt_id)
        if row is None or row.final_normalized is None:
            continue
        heldout = record.heldout_score if row.heldout_normalized is None else row.heldout_normalized
        runs.append(replace(record, score=float(row.final_normalized), original_score=record.score,
                            anchors=row.anchors_kind or record.anchors, rule_score=None, curve=None,
                            heldout_score=heldout))
    notes = [f"scores re-scored by rescore run {run_id} ({described}; {status}); `original` is each attempt's "
             "score as first recorded, normalized with the anchors in force"]
    left = len(data.runs) - len(runs)
    if left:
        notes.append(f"{left} attempt(s) matching the filters were not re-scored by run {run_id} and are left out")
    return ReportData(runs=runs, humans=data.humans, notes=[*data.notes, *notes])


def attempt_rescores(session: Session, attempt_id: int) -> list[dict[str, Any]]:
    """Every re-score of one attempt, oldest first, with what made it."""
    out = []
    for row, run in session.execute(select(Rescore, RescoreRun).join(RescoreRun, Rescore.run_id == RescoreRun.id)
                                    .where(Rescore.attempt_id == attempt_id).order_by(Rescore.id)):
        calls = [c for c in row.scores if c.get("kind") == "rescore"]
        solutions = len({c.get("sha256") or c.get("snapshot") for c in calls})
        out.append({
            "run": run.id, "when": run.created_at.isoformat(), "status": row.status.value, "reason": row.reason,
            "rule": row.rule, "env_version": row.env_version, "content_hash": row.content_hash,
            "raw": row.final_raw, "normalized": row.final_normalized,
            "heldout_raw": row.heldout_raw, "heldout_normalized": row.heldout_normalized,
            "anchors": {"start": row.anchors_start, "reference": row.anchors_reference, "kind": row.anchors_kind},
            "calls": len(calls), "invalid": sum(1 for c in calls if not c.get("valid")),
            "solution": _solution(row.rule, solutions), "skipped_snapshots": list(row.skipped_snapshots or []),
            "hardware": run.hardware_description, "backend": run.backend,
        })
    return out


def _solution(rule: str | None, solutions: int) -> str:
    """Which solution(s) a re-score scored, in words (rebench.rescoring.plan): a reader comparing it with
    the original must know whether it is the final solution's or the best call's."""
    if rule == "best":
        return f"the best of the score calls' solutions re-scored ({solutions}; best rule)"
    if rule == "rescore_best":
        return f"the best median of the snapshots re-scored ({solutions}; rescore_best rule)"
    return "the final solution re-scored"


def rescore_lines(rescores: list[dict[str, Any]], original_raw: float | None,
                  original_normalized: float | None) -> list[str]:
    """One line per re-score, beside the original final score."""
    def num(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = []
    for r in rescores:
        if r["status"] != RescoreStatus.DONE:
            lines.append(f"rescore run {r['run']}: skipped: {r['reason']}")
            continue
        anchors = r["anchors"]
        lines.append(
            f"rescore run {r['run']} ({r['when'][:16]}, version {r['env_version']} {r['content_hash']}): "
            f"raw {num(r['raw'], 4)} (original {num(original_raw, 4)}), normalized {num(r['normalized'])} "
            f"(original {num(original_normalized)}); {r['solution']}, {r['calls']} call(s), {r['invalid']} invalid; "
            f"{anchors['kind']} anchors {num(anchors['start'], 4)} -> {num(anchors['reference'], 4)}")
        lines.extend(f"  {line}" for line in r["skipped_snapshots"])
    return lines
