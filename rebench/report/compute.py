"""Building the report: the steps from loaded runs to a Report, in order. The parts are their own
modules: the rows (rebench.report.rows), score@k per allocation (score_rows), summaries and standings
(summaries) and the headline (headline)."""

from __future__ import annotations

from collections import defaultdict

from rebench.errors import RebenchError
from rebench.report.allocation import CURVE_KS
from rebench.report.data import HUMAN_AGENT, HUMAN_ATTEMPT_S, ReportData
from rebench.report.estimators import ESTIMATORS
from rebench.report.headline import (
    agent_summaries,
    beyond_data,
    headline_rows,
    outlier_note,
    stamp_agent_fields,
)
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.rows import ALL, CURVE_MAX_TOTAL_S, Report, ReportSettings, ScoreRow
from rebench.report.score_rows import RowBuilder, group_runs, mark_best
from rebench.report.summaries import attempt_summaries, each_run_once, human_attempt_rows, human_summary, standings


def build_report(data: ReportData, settings: ReportSettings, info: EnvironmentInfo | None = None) -> Report:
    """All numbers of one report from the loaded runs; pure apart from reading environment metadata."""
    if settings.estimator not in ESTIMATORS:
        raise RebenchError(f"unknown estimator {settings.estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    builder = RowBuilder(settings, info or default_info())
    loaded = each_run_once(data.runs + data.humans)
    notes = list(data.notes)
    if settings.exclude_above is not None:
        limit = settings.exclude_above
        left_out = [r for r in loaded if r.score > limit]
        data = ReportData(
            runs=[r for r in data.runs if r.score <= limit],
            humans=[r for r in data.humans if r.score <= limit],
            notes=data.notes,
        )
        counts: dict[str, int] = defaultdict(int)
        for run in left_out:
            counts[run.agent] += 1
        detail = ", ".join(f"{agent} {n}" for agent, n in sorted(counts.items())) or "none"
        notes.append(f"--exclude-above {limit:g} left out {len(left_out)} runs ({detail})")
    # humans' 8 h attempts are the yardstick (`data.humans`, whatever the filters); own human attempts of
    # other lengths are grouped like an agent's, still as `human`
    agent_runs = [r for r in data.runs if r.agent != HUMAN_AGENT or r.budget_s != HUMAN_ATTEMPT_S]
    groups = group_runs(agent_runs)
    human_groups = group_runs(data.humans)
    all_groups = {**groups, **human_groups}
    totals = settings.total_budgets_s
    rows: list[ScoreRow] = []
    curves: list[ScoreRow] = []
    for key in sorted(all_groups):
        runs = all_groups[key]
        rows.extend(builder.group(key, runs, totals))
        cap = max(CURVE_MAX_TOTAL_S, *totals)
        curve_totals = sorted({k * key[2] for k in CURVE_KS if k * key[2] <= cap} | {t for t in totals if t < key[2]})
        curves.extend(builder.group(key, runs, curve_totals))
    beyond = sum(1 for row in rows if beyond_data(row))
    if beyond and settings.strict:
        rows = [row for row in rows if not beyond_data(row)]
        curves = [row for row in curves if not beyond_data(row)]
        notes.append(f"--strict left out {beyond} estimate(s) whose k is above the runs behind them")
    elif beyond:
        fewest = min(row.min_n for row in rows if beyond_data(row))
        notes.append(f"† {beyond} estimate(s) have k above the runs behind them (as few as {fewest}): each is only "
                     "the best of those runs (the n column; `--strict` leaves them out)")
    notes += mark_best(rows)
    mark_best(curves)  # comparability needs the per-environment rows; the plot keeps the averages
    curves = [r for r in curves if r.environment == ALL]
    run_ids = {r.attempt_id for r in data.runs}
    outliers = outlier_note(loaded, settings)
    if outliers:
        notes.append(outliers)
    human_attempts = human_attempt_rows(loaded)
    corrected = sum(1 for h in human_attempts if h.corrections)
    if corrected:
        notes.append(f"{corrected} own human attempt(s) have pause corrections (`rebench human adjust`): their "
                     "score over time is placed on corrected working time; both times are in the human attempts table")
    own_profiles = sorted({r.profile for r in data.runs if r.source == "own" and r.profile != "paper"})
    if own_profiles and any(r.source == "imported" for r in data.runs + data.humans):
        notes.append(
            f"own attempts ran the {', '.join(own_profiles)} profile(s) while imported METR runs used the "
            "paper's setup; comparisons across the two are indicative only"
        )
    agents = agent_summaries(builder, loaded, rows, settings.compare_at_s)
    stamp_agent_fields([*rows, *curves], agents)
    return Report(
        settings=settings,
        rows=rows,
        curves=curves,
        standings=standings(rows, data.humans),
        summary=attempt_summaries(data.runs + [h for h in data.humans if h.attempt_id not in run_ids]),
        humans=human_summary(data.humans),
        data=data,
        notes=notes,
        agents=agents,
        headline=headline_rows(rows, data.humans, settings),
        human_attempts=human_attempts,
    )
