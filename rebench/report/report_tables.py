"""A report's tables as text cells (title, header, rows): the headline, agents, gateway, score@k,
standings and human tables, shared by the terminal, Markdown and HTML renderings.
"""

from __future__ import annotations

from collections.abc import Sequence

from rebench.budget import format_duration
from rebench.provenance import rebench_version
from rebench.report.allocation import Allocation
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.money import tokens_per_hour, unique_runs
from rebench.report.paper import PAPER_CITATION, PAPER_ENVIRONMENTS, PAPER_HUMANS
from rebench.report.rows import ALL, AgentSummary, Report, ScoreRow

ROW_FIELDS = list(ScoreRow.model_fields)
KEY_COLUMNS = {"environment", "agent", "best agent"}  # copied by users: never cut or wrapped
NUMERIC_COLUMNS = {
    "n",
    "min n",
    "envs",
    "score",
    "mean",
    "best",
    "human percentile",
    "runs",
    "unsubmitted",
    "no submit",
    ">2",
    "above 2",
    "corrections",
}
Table_ = tuple[str, list[str], list[list[str]]]


def _f(value: float) -> str:
    return f"{value:.3f}"


def _pct(value: float) -> str:
    return f"{100 * value:.0f}%"


def settings_line(report: Report) -> str:
    s = report.settings
    return (
        f"estimator {s.estimator}; 95% percentile-bootstrap intervals from {s.n_bootstrap} resamples "
        f"of each environment's runs, seed {s.seed}; environments weighted equally; "
        f"rebench {rebench_version()}"
    )


def _allocation(row: ScoreRow) -> str:
    label = Allocation(row.budget_s, row.k, row.total_s, row.truncated).label
    return f"{label}†" if row.k > row.min_n else label


def _sorted_rows(rows: Sequence[ScoreRow]) -> list[ScoreRow]:
    return sorted(rows, key=lambda r: (r.agent != "human", r.agent, r.source, r.total_s, r.budget_s))


def _best_mark(row: ScoreRow, widest: dict[tuple[str, str, float], int]) -> str:
    if row.best_allocation:
        return "*"
    if not row.comparable:
        return f"not comparable: {row.envs} of {widest[(row.agent, row.source, row.total_s)]} envs"
    return ""


def _headline_table(report: Report) -> Table_:
    rows = []
    for line in report.headline:
        ratio = "-"
        if line.ratio is not None:
            ratio = f"{line.ratio:.2f}" + ("" if line.same_environments else " (different envs)")
        rows.append(
            [
                format_duration(line.total_s),
                line.agent or "-",
                line.allocation or "-",
                _f(line.agent_score) if line.agent_score is not None else "-",
                str(line.agent_envs) if line.agent else "-",
                _f(line.human_score) if line.human_score is not None else "-",
                ratio,
                line.human_data,
            ]
        )
    return (
        "best agent vs human experts by total time budget per environment (average over environments; "
        "human = their score, ratio = agent / human)",
        ["total", "best agent", "alloc", "score", "envs", "human", "ratio", "human data"],
        rows,
    )


def _per_hour(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _gap(a: AgentSummary) -> str:
    """The mean gap between best intermediate and held-out final, with its interval (rebench.report.heldout)."""
    if a.heldout_gap is None or a.heldout_gap_low is None or a.heldout_gap_high is None:
        return "-"
    return (f"{_f(a.heldout_gap)} [{_f(a.heldout_gap_low)}, {_f(a.heldout_gap_high)}] ({a.probing}/{a.heldout_n}; "
            f"{_per_hour(a.calls_per_hour)})")


def _agents_table(report: Report) -> Table_:
    at = format_duration(report.settings.compare_at_s)
    rates = tokens_per_hour(unique_runs(report))
    rows = [
        [
            a.agent,
            a.source,
            str(a.attempts),
            str(a.not_submitted),
            str(a.above_2),
            f"{_f(a.score)} ({a.allocation})" if a.score is not None else "-",
            (
                f"{_f(a.score_without_above_2)} ({a.allocation_without_above_2})"
                if a.score_without_above_2 is not None
                else "-"
                if a.above_2
                else "same"
            ),
            _per_hour(rates.get(a.agent)) if a.source == "own" else "-",
            _gap(a),
        ]
        for a in sorted(report.agents, key=lambda a: (a.agent != "human", a.agent, a.source))
    ]
    return (
        f"runs per agent: ended without submitting (no submit), scoring above 2 (>2), and the best score at "
        f"{at} with and without those above 2, and model tokens per working hour (tokens/h; - where none recorded)",
        ["agent", "source", "runs", "no submit", ">2", f"best at {at}", "without >2", "tokens/h",
         "held-out gap (probing; calls/h)"],
        rows,
    )


def _gateway_table(report: Report) -> Table_:
    rows = [
        [a.environment, a.agent, a.source, format_duration(a.budget_s), str(a.n), str(a.gateway.requests),
         str(a.gateway.refused), str(a.gateway.input_tokens), str(a.gateway.output_tokens),
         f"{a.gateway.cost_usd:.4f}"]
        for a in report.summary if a.gateway is not None
    ]
    return (
        "model gateway usage: the agents' requests from inside the sandbox (refused: credit spent, wrong model, ...)",
        ["environment", "agent", "source", "budget", "runs", "requests", "refused", "tokens in", "tokens out",
         "cost USD"],
        rows,
    )


def all_tables(report: Report, by_env: bool, info: EnvironmentInfo) -> list[Table_]:
    """Every table of the report as (title, header, rows) so all formats show the same numbers."""
    tables = [_headline_table(report), _agents_table(report)]
    if any(a.gateway is not None for a in report.summary):
        tables.append(_gateway_table(report))
    overall = [r for r in report.rows if r.environment == ALL]
    widest: dict[tuple[str, str, float], int] = {}
    for r in overall:
        key = (r.agent, r.source, r.total_s)
        widest[key] = max(widest.get(key, 0), r.envs)
    tables.append(
        (
            "score@k averaged over environments, by total budget (* = best allocation at that total)",
            [
                "agent",
                "source",
                "total",
                "allocation",
                "envs",
                "min n",
                "score",
                "95% interval",
                "best alloc",
            ],
            [
                [
                    r.agent,
                    r.source,
                    format_duration(r.total_s),
                    _allocation(r),
                    str(r.envs),
                    str(r.min_n),
                    _f(r.point),
                    f"{_f(r.low)}-{_f(r.high)}",
                    _best_mark(r, widest),
                ]
                for r in _sorted_rows(overall)
            ],
        )
    )
    if by_env:
        per_env = sorted(
            (r for r in report.rows if r.environment != ALL),
            key=lambda r: (r.environment, r.agent != "human", r.agent, r.source, r.total_s, r.budget_s),
        )
        tables.append(
            (
                "score@k per environment (* = best allocation at that total)",
                [
                    "environment",
                    "agent",
                    "source",
                    "total",
                    "alloc",
                    "n",
                    "score",
                    "95% interval",
                    "*",
                ],
                [
                    [
                        r.environment,
                        r.agent,
                        r.source,
                        format_duration(r.total_s),
                        _allocation(r),
                        str(r.n),
                        _f(r.point),
                        f"{_f(r.low)}-{_f(r.high)}",
                        "*" if r.best_allocation else "",
                    ]
                    for r in per_env
                ],
            )
        )
    if report.standings:
        tables.append(
            (
                "standing among human experts: the human 8 h percentile each best allocation matches",
                ["agent", "source", "total", "allocation", "envs", "score", "human percentile"],
                [
                    [
                        s.agent,
                        s.source,
                        format_duration(s.total_s),
                        s.allocation,
                        str(s.envs),
                        _f(s.point),
                        f"{s.human_percentile:.0f}",
                    ]
                    for s in sorted(report.standings, key=lambda s: (s.agent, s.source, s.total_s))
                ],
            )
        )
    tables.append(
        (
            "attempts per environment, agent and per-attempt budget (normalized scores; where attempts were "
            "re-scored, `rule` is the mean by RE-Bench's rule, the best single score call)",
            ["environment", "agent", "source", "budget", "n", "unsubmitted", "mean", "best", "anchors"],
            [
                [
                    a.environment,
                    a.agent,
                    a.source,
                    format_duration(a.budget_s),
                    str(a.n),
                    str(a.not_submitted),
                    _f(a.mean) + (f" (rule {_f(a.rule_mean)})" if a.rule_mean is not None else "")
                    + (f" (original {_f(a.original_mean)})" if a.original_mean is not None else "")
                    + (f" (held-out {_f(a.heldout_mean)})" if a.heldout_mean is not None else ""),
                    _f(a.best),
                    a.anchors + (f", {a.rescored} re-scored" if a.rescored else ""),
                ]
                for a in report.summary
            ],
        )
    )
    tables.append(_humans_table(report, info))
    if report.human_attempts:
        tables.append(_human_attempts_table(report))
    return tables


def _human_attempts_table(report: Report) -> Table_:
    """Own human attempts with both working times: corrections (`rebench human adjust`) never edit the record."""
    return (
        "own human attempts: working time as recorded and corrected (pauses added by `rebench human adjust`)",
        ["attempt", "environment", "expert", "budget", "score", "working", "corrected", "corrections"],
        [
            [
                str(h.attempt_id),
                h.environment,
                h.expert or "-",
                format_duration(h.budget_s),
                _f(h.score),
                f"{format_duration(h.working_s)} ({h.working_s:.0f} s)",
                f"{format_duration(h.corrected_working_s)} ({h.corrected_working_s:.0f} s)",
                str(h.corrections),
            ]
            for h in report.human_attempts
        ],
    )


def _humans_table(report: Report, info: EnvironmentInfo) -> Table_:
    ours = report.humans
    paper_env = {row.environment: row for row in PAPER_ENVIRONMENTS}
    rows = [
        ["runs (8 h attempts)", str(ours.runs) if ours else "-", str(PAPER_HUMANS.runs)],
        ["mean normalized score", _f(ours.mean) if ours else "-", f"{PAPER_HUMANS.mean_normalized:.2f}"],
        ["non-zero score", _pct(ours.fraction_nonzero) if ours else "-", _pct(PAPER_HUMANS.fraction_nonzero)],
        [
            "at or above the reference",
            _pct(ours.fraction_at_or_above_reference) if ours else "-",
            _pct(PAPER_HUMANS.fraction_at_or_above_reference),
        ],
    ]
    envs = sorted(set(paper_env) | set(ours.per_environment if ours else {}))
    for env in envs:
        mine = ours.per_environment.get(env) if ours else None
        theirs = paper_env.get(env)
        rows.append(
            [
                f"{info.title(env)}: runs, best",
                f"{mine[0]}, {_f(mine[1])}" if mine else "-",
                f"{theirs.human_runs}, {theirs.best_normalized:.2f}" if theirs else "-",
            ]
        )
    return ("human 8 h attempts: this store vs the paper", ["", "this store", PAPER_CITATION], rows)
