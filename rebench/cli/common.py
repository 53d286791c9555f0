"""Shared CLI pieces: the database option, consoles, JSON output."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from rebench.literal import LiteralConsole

if TYPE_CHECKING:
    from rebench.api import Observer
    from rebench.store.db import Store

console = LiteralConsole()
err_console = LiteralConsole(stderr=True)
"""Every command prints through these: no markup is read in what they print, and control characters
come out escaped (rebench.literal), since much of it came from an attempt."""


def labelled(label: str, message: object, style: str = "yellow") -> Text:
    """`label:` in `style`, then `message` as literal text: a warning or a note to print."""
    return Text.assemble((f"{label}:", style), " ", str(message))

DbOption = Annotated[
    Path | None,
    typer.Option("--db", help="SQLite database file (default: $REBENCH_DB or results/rebench.db)."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout for scripts.")]


def open_store(db: Path | None, *, read_only: bool = False) -> Store:
    """`read_only` for commands that only read: they refuse a missing or older database instead of
    creating or upgrading it (rebench.store.db.Store)."""
    from rebench.store.db import Store, default_db_path  # SQLAlchemy: only for commands that use the database

    return Store(db if db is not None else default_db_path(), read_only=read_only)


def observer(**callbacks: Any) -> Observer:
    """An API observer that prints warnings, notes and build/calibration logs on stderr,
    calibration results on stdout, plus whatever `callbacks` a command adds."""
    from rebench.api import Observer  # the API loads only when a command runs, not for --help

    printers: dict[str, Any] = {
        "warning": lambda m: err_console.print(labelled("warning", m)),
        "note": lambda m: err_console.print(labelled("note", m)),
        "log": lambda m: err_console.print(m, highlight=False),
        "calibrated": lambda result: console.print(result.summary()),
    }
    return Observer(**{**printers, **callbacks})


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def print_json(document: Any) -> None:
    """Write JSON straight to stdout (not through rich, which would wrap long lines). An object
    document says which rebench printed it (`generated_by`); a list's rows stay plain records."""
    if isinstance(document, dict):
        from rebench.provenance import rebench_version

        document = {**document, "generated_by": {"rebench_version": rebench_version()}}
    typer.echo(json.dumps(_clean(document), indent=2, default=str))


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"
