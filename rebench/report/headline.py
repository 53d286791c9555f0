"""The headline: each agent's best score at the paper's total budgets against the experts', the
per-agent summaries beside it, and the note on implausibly high scores.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from rebench.budget import format_duration
from rebench.report import heldout
from rebench.report.allocation import Allocation
from rebench.report.data import HUMAN_AGENT, HUMAN_ATTEMPT_S, RunRecord
from rebench.report.rows import (
    ALL,
    HEADLINE_TOTALS_S,
    PLAUSIBLE_MAX,
    AgentSummary,
    HeadlineRow,
    ReportSettings,
    ScoreRow,
)
from rebench.report.score_rows import RowBuilder, allocation_key, environment_sets, group_runs, mark_best


def _best_all(rows: Iterable[ScoreRow], agent: str, source: str, total_s: float) -> ScoreRow | None:
    wanted = (agent, source, total_s, ALL, True)
    return next((r for r in rows if (r.agent, r.source, r.total_s, r.environment, r.best_allocation) == wanted), None)


def beyond_data(row: ScoreRow) -> bool:
    """k above the runs behind the estimate: it is then only the best of those runs."""
    return row.k > row.min_n


def _label(row: ScoreRow) -> str:
    """The allocation, marked `†` when k exceeds the runs behind it (`10m@192†`; the notes say how many)."""
    label = Allocation(row.budget_s, row.k, row.total_s, row.truncated).label
    return f"{label}†" if beyond_data(row) else label


def agent_summaries(
    builder: RowBuilder, loaded: list[RunRecord], rows: list[ScoreRow], total_s: float
) -> list[AgentSummary]:
    """Per agent: attempts (as loaded), those without a submission or above 2, and the headline at
    `total_s` as reported and recomputed without the runs above 2."""
    by_agent: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in loaded:
        by_agent[(run.agent, run.source)].append(run)
    out = []
    for (agent, source), runs in sorted(by_agent.items()):
        best = _best_all(rows, agent, source, total_s)
        summary = AgentSummary(
            agent=agent,
            source=source,
            attempts=len(runs),
            not_submitted=sum(not r.submitted for r in runs),
            above_2=sum(r.score > PLAUSIBLE_MAX for r in runs),
            total_s=total_s,
            allocation=_label(best) if best else None,
            score=best.point if best else None,
            **heldout.agent_fields(runs, builder.settings.n_bootstrap, builder.settings.seed),
        )
        if summary.above_2:
            kept = [r for r in runs if r.score <= PLAUSIBLE_MAX]
            groups = sorted(group_runs(kept).items())
            again = [row for key, members in groups for row in builder.group(key, members, [total_s])]
            mark_best(again)
            without = _best_all(again, agent, source, total_s)
            summary.allocation_without_above_2 = _label(without) if without else None
            summary.score_without_above_2 = without.point if without else None
        out.append(summary)
    return out


AGENT_ROW_FIELDS = ("heldout_gap", "heldout_gap_low", "heldout_gap_high", "heldout_n", "probing", "calls_per_hour")


def stamp_agent_fields(rows: Iterable[ScoreRow], agents: Iterable[AgentSummary]) -> None:
    """Copy each agent's held-out columns onto its score@k rows (see ScoreRow)."""
    by_agent = {(a.agent, a.source): a for a in agents}
    for row in rows:
        summary = by_agent.get((row.agent, row.source))
        if summary is not None:
            for name in AGENT_ROW_FIELDS:
                setattr(row, name, getattr(summary, name))


def _human_gap(total_s: float, humans: list[RunRecord], settings: ReportSettings) -> str:
    """Why humans have no row at `total_s`."""
    if total_s not in settings.total_budgets_s:
        return "not computed: this total is not in --budgets"
    if not humans:
        return "no: no human 8 h attempts in the store"
    if total_s < HUMAN_ATTEMPT_S:
        if not any(h.curve for h in humans):
            return (
                f"no: human attempts are 8 h and none has a score log (METR's export has none), so "
                f"there is no human score at {format_duration(total_s)}"
            )
        return f"no: no human attempt's score log reaches {format_duration(total_s)}"
    return f"no: {format_duration(total_s)} is not a whole number of 8 h human attempts"


def headline_rows(rows: list[ScoreRow], humans: list[RunRecord], settings: ReportSettings) -> list[HeadlineRow]:
    """Best agent against the humans at 2h, 8h, 16h and 32h total per environment.

    The best agent is the highest best-allocation average among the agents covering the most
    environments at that total (an average over fewer environments is not comparable).
    """
    env_sets = environment_sets(rows)
    best = [r for r in rows if r.environment == ALL and r.best_allocation]
    out = []
    for total_s in HEADLINE_TOTALS_S:
        at = [r for r in best if r.total_s == total_s]
        agents = [r for r in at if r.agent != HUMAN_AGENT]
        people = [r for r in at if r.agent == HUMAN_AGENT]
        line = HeadlineRow(total_s=total_s, human_data="yes")
        top = max(agents, key=lambda r: (r.envs, r.point), default=None)
        human = max(people, key=lambda r: (r.envs, r.point), default=None)
        if top is not None:
            line.agent, line.agent_source = top.agent, top.source
            line.allocation, line.agent_score, line.agent_envs = _label(top), top.point, top.envs
        if human is None:
            line.human_data = _human_gap(total_s, humans, settings)
        else:
            line.human_allocation, line.human_score, line.human_envs = _label(human), human.point, human.envs
            line.human_data = f"yes ({line.human_allocation}, {human.n} runs)"
        if top is not None and human is not None:
            line.same_environments = env_sets.get(allocation_key(top)) == env_sets.get(allocation_key(human))
            if human.point > 0:
                line.ratio = top.point / human.point
        out.append(line)
    return out


def outlier_note(runs: list[RunRecord], settings: ReportSettings) -> str | None:
    high: dict[str, int] = defaultdict(int)
    for run in runs:
        if run.score > PLAUSIBLE_MAX:
            high[run.agent] += 1
    if not high or (settings.exclude_above is not None and settings.exclude_above <= PLAUSIBLE_MAX):
        return None
    counts = ", ".join(f"{agent} {n}" for agent, n in sorted(high.items()))
    return (
        f"{sum(high.values())} runs score above 2 ({counts}) and are counted; the paper never saw normalized "
        "scores above 2 after zeroing runs it judged to be cheating, which METR's export does not always do. "
        "The per-agent table shows the headline without them; --exclude-above 2 leaves them out"
    )
