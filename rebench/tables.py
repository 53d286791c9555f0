"""Terminal tables whose key columns a user can always copy.

Key columns (environment, agent, attempt id) are never truncated or wrapped: a user
types those names into the next command. Descriptive columns wrap at word boundaries,
and when even that does not fit the terminal (80 columns, or a pipe, which rich also
treats as 80), the lowest-priority descriptive columns are left out, with a note saying
which and how to see them. If the key columns alone are wider than the terminal, the
table is printed wider than the terminal rather than cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from rebench.literal import LiteralConsole, literal_text

# rich's default box: one border left of each column and one at the end, one space of padding each side
_PER_COLUMN = 3
_EDGE = 1


@dataclass(frozen=True)
class Col:
    """A column: `key` columns stay whole; the others wrap, and are dropped first from the right."""

    header: str
    key: bool = False
    justify: str = "left"


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def _needed(col: Col, cells: Sequence[str]) -> int:
    """The narrowest width at which the column shows every value without cutting a word."""
    texts = [col.header, *cells]
    if col.key:
        return max(len(line) for t in texts for line in (t.splitlines() or [""]))
    return max(_longest_word(t) for t in texts)


def fit_columns(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int,
                drop_first: Sequence[str] = ()) -> list[int]:
    """Indexes of the columns to show at this width: all keys, and as many descriptive ones as fit.

    Descriptive columns go in `drop_first`'s order (headers), then the others from the right.
    """
    needs = [_needed(col, [row[i] for row in rows]) for i, col in enumerate(columns)]
    keep = list(range(len(columns)))
    headers = [col.header for col in columns]
    first = [headers.index(h) for h in drop_first if h in headers and not columns[headers.index(h)].key]
    rest = [i for i, col in enumerate(columns) if not col.key and i not in first]
    droppable = rest + first[::-1]  # popped from the end

    def total(indexes: list[int]) -> int:
        return sum(needs[i] for i in indexes) + _PER_COLUMN * len(indexes) + _EDGE

    while total(keep) > width and droppable:
        keep.remove(droppable.pop())
    return keep


def print_table(console: Console, title: str | None, columns: Sequence[Col], rows: Sequence[Sequence[str]],
                *, more: str | None = None, drop_first: Sequence[str] = (), title_justify: str = "center") -> None:
    """Print rows under columns, fitted to the console's width (see the module docstring).

    `more` names where the full data lives (e.g. "--json"), for the note about dropped columns.
    """
    width = console.width
    keep = fit_columns(columns, rows, width, drop_first)
    table = Table(title=literal_text(title) if title is not None else None, title_justify=title_justify)  # type: ignore[arg-type]
    needs = {i: _needed(columns[i], [row[i] for row in rows]) for i in keep}
    for i in keep:
        col = columns[i]
        if col.key:
            table.add_column(literal_text(col.header), no_wrap=True, justify=col.justify)  # type: ignore[arg-type]
        else:
            table.add_column(literal_text(col.header), overflow="fold", justify=col.justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*[literal_text(row[i]) for i in keep])
    keys_width = sum(needs.values()) + _PER_COLUMN * len(keep) + _EDGE
    if keys_width > width:  # rich never renders wider than its console: print through a wider one
        wide = LiteralConsole(file=console.file, width=keys_width, force_terminal=console.is_terminal,
                              color_system=console.color_system, soft_wrap=True)
        wide.print(table, crop=False)
    else:
        console.print(table)
    dropped = [columns[i].header for i in range(len(columns)) if i not in keep]
    if dropped:
        where = f"; {more} shows them" if more else ""
        console.print(literal_text(f"(left out to fit {width} columns: {', '.join(dropped)}{where})"))
