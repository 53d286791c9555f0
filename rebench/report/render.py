"""Rendering a report: terminal tables, JSON, Markdown, CSV and one self-contained HTML page."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from rebench.budget import format_duration
from rebench.errors import RebenchError
from rebench.provenance import rebench_version
from rebench.report.allocation import Allocation
from rebench.report.compute import ALL, AgentSummary, Report, ScoreRow
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.money import spend, tokens_per_hour, unique_runs
from rebench.report.paper import PAPER_CITATION, PAPER_ENVIRONMENTS, PAPER_HUMANS
from rebench.report.story import AttemptStory, stories_html, stories_markdown, story_file, story_png
from rebench.report.tree import SolutionTree, tree_html
from rebench.tables import Col, print_table

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


def _tables(report: Report, by_env: bool, info: EnvironmentInfo) -> list[Table_]:
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


PIPED_WIDTH = 160  # piped output is read in files and pagers; do not squeeze the tables to 80 columns


def _drop_constant_source(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    if "source" not in header:
        return header, rows
    i = header.index("source")
    if len({row[i] for row in rows}) > 1:
        return header, rows
    return header[:i] + header[i + 1 :], [row[:i] + row[i + 1 :] for row in rows]


# Key columns (environment, agent, allocation) are shown whole; the others wrap at spaces and
# are left out, DROPPABLE's first, then from the right, until the table fits the terminal (see rebench.tables).
WRAPPING = {"human data", "best alloc", "", "anchors", "without >2"}
DROPPABLE = ("anchors", "95% interval", "min n", "source", "envs", "total", "n", "mean")


def _columns(header: list[str]) -> list[Col]:
    def key(column: str) -> bool:  # names (agent, environment, allocation), not numbers or prose
        return not (column in DROPPABLE or column in WRAPPING or column in NUMERIC_COLUMNS
                    or column.startswith("best at "))

    return [Col(column, key=key(column), justify="right" if column in NUMERIC_COLUMNS else "left")
            for column in header]


def print_terminal(report: Report, console: Console, by_env: bool = False, info: EnvironmentInfo | None = None) -> None:
    info = info or default_info()
    if not console.is_terminal and console.width < PIPED_WIDTH:
        console = Console(width=PIPED_WIDTH, file=console.file, highlight=False)
    console.print(settings_line(report))
    sources = sorted({r.source for r in report.rows})
    if len(sources) == 1:
        console.print(f"all attempts below are {sources[0]}")
    for title, full_header, full_rows in _tables(report, by_env, info):
        header, rows = _drop_constant_source(full_header, full_rows) if len(sources) == 1 else (full_header, full_rows)
        print_table(console, title, _columns(header), rows, more="--json or --out", drop_first=DROPPABLE,
                    title_justify="left")
    for note in report.notes:
        console.print(f"note: {note}")


def report_json(report: Report) -> list[dict[str, Any]]:
    """`--json`: the report's rows, each self-describing (see ScoreRow)."""
    return [row.model_dump() for row in report.rows]


def _figures(report: Report, info: EnvironmentInfo) -> list[tuple[str, str, bytes | None]]:
    """(title, file name, PNG or None when there is nothing to plot) for every plot of the report."""
    from rebench.report import money, plots

    at = report.settings.compare_at_s
    return [
        ("Best allocation per agent vs total time budget", "score_vs_budget.png", plots.score_vs_budget(report)),
        (
            "Score@k by agent and per-attempt length",
            "score_by_attempt_length.png",
            plots.score_by_attempt_length(report),
        ),
        (
            f"Per environment at {format_duration(at)} total budget",
            f"per_environment_{format_duration(at)}.png",
            plots.per_environment(report, at, info),
        ),
        ("Score over time (attempts with score logs)", "score_over_time.png", plots.score_over_time(report, info)),
        ("Score vs money per attempt", "score_vs_money.png", money.score_vs_money(report)),
    ]


def notes(report: Report) -> list[str]:
    """The report's notes and what the money plot left out."""
    left = spend(unique_runs(report)).note()
    return [*report.notes, *([left] if left else [])]


def _markdown_table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _markdown(report: Report, info: EnvironmentInfo, figures: list[tuple[str, str, bytes | None]],
              stories: Sequence[AttemptStory] = ()) -> str:
    lines = ["# rebench report", "", settings_line(report), ""]
    tables = _tables(report, True, info)
    lines += _markdown_table(*tables[0])
    for title, name, png in figures:
        lines += [f"## {title}", "", f"![{title}]({name})" if png is not None else "No data for this plot.", ""]
    for table in tables[1:]:
        lines += _markdown_table(*table)
    lines += stories_markdown(stories)
    lines += [f"- note: {note}" for note in notes(report)]
    return "\n".join(lines) + "\n"


def score_rows_csv(report: Report | None) -> str:
    """The score@k rows as CSV, one column per ScoreRow field (score_at_k.csv, `--format csv`);
    only the header when there is no report (nothing matched)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=ROW_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in report.rows if report is not None else []:
        writer.writerow(row.model_dump())
    return buffer.getvalue()


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
th { background: #f0f0f0; }
img { max-width: 100%; }
.note { color: #555; }
.tree li.buggy > span { color: #a33; }
.tree li.best > span { font-weight: bold; color: #161; }
.tree pre { background: #f7f7f7; padding: 4px; max-height: 20em; overflow: auto; }
"""


def _html_table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    parts = [f"<h2>{html.escape(title)}</h2><table><tr>"]
    parts += [f"<th>{html.escape(h)}</th>" for h in header]
    parts.append("</tr>")
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>")
    parts.append("</table>")
    return parts


def _data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _html(report: Report, info: EnvironmentInfo, figures: list[tuple[str, str, bytes | None]],
          trees: Sequence[SolutionTree] = (), stories: Sequence[tuple[AttemptStory, bytes]] = ()) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>rebench report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>rebench report</h1>",
        f"<p>{html.escape(settings_line(report))}</p>",
    ]
    tables = _tables(report, True, info)
    parts += _html_table(*tables[0])  # the headline comes first
    for title, _, png in figures:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if png is None:
            parts.append("<p class='note'>No data for this plot.</p>")
        else:
            parts.append(f"<img alt='{html.escape(title)}' src='{_data_url(png)}'>")
    for table in tables[1:]:
        parts += _html_table(*table)
    parts += [tree_html(tree) for tree in trees]
    if stories:
        parts.append(stories_html([s for s, _ in stories], {s.run.attempt_id: _data_url(png) for s, png in stories}))
    parts += [f"<p class='note'>Note: {html.escape(note)}</p>" for note in notes(report)]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_outputs(report: Report, out_dir: Path, info: EnvironmentInfo | None = None,
                  trees: Sequence[SolutionTree] = (), stories: Sequence[AttemptStory] = ()) -> list[Path]:
    """report.md, score_at_k.csv, report.html and the plots as PNG files in `out_dir`; returns the paths.
    `trees` (aide attempts' solution trees) are drawn at the end of report.html; each of `stories`
    gets its plot in attempts/ and a folded section of report.html (rebench.report.story)."""
    info = info or default_info()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RebenchError(f"cannot create the output folder {str(out_dir)!r}: {exc}") from None
    figures = _figures(report, info)
    drawn = [(story, story_png(story)) for story in stories]
    files: dict[Path, bytes] = {
        out_dir / "report.md": _markdown(report, info, figures, stories).encode("utf-8"),
        out_dir / "score_at_k.csv": score_rows_csv(report).encode("utf-8"),
        out_dir / "report.html": _html(report, info, figures, trees, drawn).encode("utf-8"),
    }
    files.update({out_dir / name: png for _, name, png in figures if png is not None})
    files.update({out_dir / story_file(story): png for story, png in drawn})
    if drawn:
        (out_dir / "attempts").mkdir(exist_ok=True)
    for path, content in files.items():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(content)
        tmp.replace(path)
    return list(files)


def dumps_json(report: Report) -> str:
    return json.dumps(report_json(report), indent=2)
