"""A report printed on the terminal: its tables fitted to the console's width (columns that can go
are dropped or wrapped, key columns never are).
"""

from __future__ import annotations

from rich.console import Console

from rebench.literal import LiteralConsole, literal_text
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.report_tables import NUMERIC_COLUMNS, all_tables, settings_line
from rebench.report.rows import Report
from rebench.tables import Col, print_table

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
        console = LiteralConsole(width=PIPED_WIDTH, file=console.file)
    console.print(literal_text(settings_line(report)))
    sources = sorted({r.source for r in report.rows})
    if len(sources) == 1:
        console.print(literal_text(f"all attempts below are {sources[0]}"))
    for title, full_header, full_rows in all_tables(report, by_env, info):
        header, rows = _drop_constant_source(full_header, full_rows) if len(sources) == 1 else (full_header, full_rows)
        print_table(console, title, _columns(header), rows, more="--json or --out", drop_first=DROPPABLE,
                    title_justify="left")
    for note in report.notes:
        console.print(literal_text(f"note: {note}"))
