"""Per-attempt summaries, the experts' summary and each agent's standing among them: the report's
tables beside the score@k rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from rebench.report import heldout
from rebench.report.allocation import Allocation
from rebench.report.data import HUMAN_AGENT, RunRecord
from rebench.report.percentiles import human_percentile_curve, locate_on_curve
from rebench.report.rows import ALL, AttemptSummary, HumanAttemptRow, HumanSummary, ScoreRow, Standing
from rebench.report.score_rows import allocation_key, by_environment, environment_sets, gateway_total


def attempt_summaries(runs: Iterable[RunRecord]) -> list[AttemptSummary]:
    groups: dict[tuple[str, str, str, float], list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(run.environment, run.agent, run.source, run.budget_s)].append(run)
    return [
        AttemptSummary(
            environment=env,
            agent=agent,
            source=source,
            budget_s=budget,
            n=len(members),
            not_submitted=sum(not r.submitted for r in members),
            mean=float(np.mean([r.score for r in members])),
            best=max(r.score for r in members),
            anchors=",".join(sorted({r.anchors for r in members})),
            rescored=sum(r.rule_score is not None for r in members),
            rule_mean=(float(np.mean([r.score if r.rule_score is None else r.rule_score for r in members]))
                       if any(r.rule_score is not None for r in members) else None),
            gateway=gateway_total(members),
            original_mean=(None if any(r.original_score is None for r in members)
                           else float(np.mean([r.original_score for r in members]))),
            **heldout.summary_fields(members),
        )
        for (env, agent, source, budget), members in sorted(groups.items())
    ]


def human_summary(humans: list[RunRecord]) -> HumanSummary | None:
    if not humans:
        return None
    scores = np.asarray([h.score for h in humans])
    per_env = by_environment((h.environment, h.score) for h in humans)
    return HumanSummary(
        runs=len(humans),
        mean=float(scores.mean()),
        fraction_nonzero=float(np.mean(scores > 0)),
        fraction_at_or_above_reference=float(np.mean(scores >= 1.0)),
        per_environment={env: (len(v), max(v)) for env, v in sorted(per_env.items())},
    )


def standings(rows: list[ScoreRow], humans: list[RunRecord]) -> list[Standing]:
    """Locate each agent's best `all` row among the human 8 h scores of the same environments."""
    human_scores = by_environment((h.environment, h.score) for h in humans)
    envs_of = environment_sets(rows)
    out = []
    for row in rows:
        if row.environment != ALL or not row.best_allocation or row.agent == HUMAN_AGENT:
            continue
        envs = envs_of.get(allocation_key(row), frozenset())
        if not envs or not envs <= set(human_scores):
            continue  # the human curve must cover the same environments as the agent's average
        curve = human_percentile_curve({env: human_scores[env] for env in sorted(envs)})
        row.human_percentile = locate_on_curve(row.point, curve)
        out.append(
            Standing(
                agent=row.agent,
                source=row.source,
                total_s=row.total_s,
                allocation=Allocation(row.budget_s, row.k, row.total_s, row.truncated).label,
                point=row.point,
                human_percentile=row.human_percentile,
                envs=row.envs,
            )
        )
    return out


def each_run_once(runs: Iterable[RunRecord]) -> list[RunRecord]:
    """Runs once each: human attempts sit both in `runs` (unless filtered out) and in `humans`."""
    return list({run.attempt_id: run for run in runs}.values())


def human_attempt_rows(runs: Iterable[RunRecord]) -> list[HumanAttemptRow]:
    return [
        HumanAttemptRow(attempt_id=r.attempt_id, environment=r.environment, expert=r.human.expert,
                        budget_s=r.budget_s, score=r.score, working_s=r.human.working_s,
                        corrected_working_s=r.human.corrected_working_s, corrections=r.human.corrections)
        for r in sorted(runs, key=lambda r: r.attempt_id) if r.human is not None
    ]
