"""Rendering a report as files: JSON, Markdown, CSV and one self-contained HTML page (the terminal
is rebench.report.terminal; the tables both use are rebench.report.report_tables)."""

from __future__ import annotations

import base64
import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rebench.budget import format_duration
from rebench.errors import RebenchError
from rebench.literal import html_literal, markdown_literal
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.money import spend, unique_runs
from rebench.report.report_tables import ROW_FIELDS, all_tables, settings_line
from rebench.report.rows import Report
from rebench.report.story import AttemptStory, stories_html, stories_markdown, story_file, story_png
from rebench.report.tree import SolutionTree, tree_html


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
    lines = [f"## {markdown_literal(title)}", "", "| " + " | ".join(map(markdown_literal, header)) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(markdown_literal, row)) + " |" for row in rows]
    return [*lines, ""]


def _markdown(report: Report, info: EnvironmentInfo, figures: list[tuple[str, str, bytes | None]],
              stories: Sequence[AttemptStory] = ()) -> str:
    lines = ["# rebench report", "", markdown_literal(settings_line(report)), ""]
    tables = all_tables(report, True, info)
    lines += _markdown_table(*tables[0])
    for title, name, png in figures:
        heading = markdown_literal(title)
        lines += [f"## {heading}", "", f"![{heading}]({name})" if png is not None else "No data for this plot.", ""]
    for table in tables[1:]:
        lines += _markdown_table(*table)
    lines += stories_markdown(stories)
    lines += [f"- note: {markdown_literal(note)}" for note in notes(report)]
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
    parts = [f"<h2>{html_literal(title)}</h2><table><tr>"]
    parts += [f"<th>{html_literal(h)}</th>" for h in header]
    parts.append("</tr>")
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{html_literal(cell)}</td>" for cell in row) + "</tr>")
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
        f"<p>{html_literal(settings_line(report))}</p>",
    ]
    tables = all_tables(report, True, info)
    parts += _html_table(*tables[0])  # the headline comes first
    for title, _, png in figures:
        parts.append(f"<h2>{html_literal(title)}</h2>")
        if png is None:
            parts.append("<p class='note'>No data for this plot.</p>")
        else:
            parts.append(f"<img alt='{html_literal(title)}' src='{_data_url(png)}'>")
    for table in tables[1:]:
        parts += _html_table(*table)
    parts += [tree_html(tree) for tree in trees]
    if stories:
        parts.append(stories_html([s for s, _ in stories], {s.run.attempt_id: _data_url(png) for s, png in stories}))
    parts += [f"<p class='note'>Note: {html_literal(note)}</p>" for note in notes(report)]
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
