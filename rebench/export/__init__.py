"""Attempts written in other tools' formats: Inspect AI eval logs (rebench.export.inspect_log).

This module imports no optional package, so a command can say which extra is missing before
anything is opened or written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rebench.errors import RebenchError

INSPECT_EXTRA_HINT = "pip install 'rebench[inspect]'"


def require_inspect(what: str) -> None:
    """A one-line error naming the extra when Inspect is not installed."""
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError:
        raise RebenchError(f"{what} needs Inspect AI (the `inspect` extra): {INSPECT_EXTRA_HINT}") from None


def make_out_folder(out: Path) -> None:
    """The export's `--out` folder, made if missing; a one-line error when it is a file or cannot be made."""
    if out.exists() and not out.is_dir():
        raise RebenchError(f"--out {str(out)!r} is a file; give a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RebenchError(f"cannot create the folder {str(out)!r}: {exc}") from None


def aware(moment: datetime | None) -> datetime:
    """SQLite gives naive datetimes back; they were written in UTC."""
    if moment is None:
        return datetime.fromtimestamp(0, UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Anchors:
    """The anchors in force for an attempt's environment and profile (as the report normalizes)."""

    start: float
    reference: float

    def normalized(self, raw: float | None) -> float | None:
        from rebench.scoring.normalize import normalize

        return None if raw is None else normalize(raw, self.start, self.reference)
