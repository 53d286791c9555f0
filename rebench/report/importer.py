"""Importing METR's run-level export (JSON Lines) as imported attempts.

Only RE-Bench rows (task family `ai_rd_*`) are kept. Each becomes one finished
attempt identified by its METR run id (`external_id`, unique per source in the
store), so importing a file twice, a subset of it, or the same run from another
file adds nothing. The file's sha256 and the row's line number are kept as
provenance. The whole file is validated before anything is written, and the
write is one transaction: bad input stops the import with one line naming the
line and value, and nothing of that import is kept.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from rebench.errors import RebenchError
from rebench.network import NetworkPolicy
from rebench.report.known_environments import (
    METR_FAMILY_PREFIX,
    RE_BENCH_ENVIRONMENTS,
    EnvironmentInfo,
    default_info,
)
from rebench.store import Attempt, Store

HUMAN_AGENT = "human"
HUMAN_ATTEMPT_S = 28800.0  # one 8 h attempt: METR writes time_limit 0 for humans
IMPORTED_PROFILE = "paper"
IMPORTED_SOURCE = "imported"
EXPECTED = "METR's run-level export (UTF-8 JSON Lines, e.g. all_runs.jsonl)"
ALLOW_EMPTY_HINT = "pass --allow-empty to accept a file without RE-Bench rows"


class ImportSummary(BaseModel):
    """What one import did, for the CLI to print."""

    path: str
    sha256: str
    added: int
    already_present: int
    skipped_other_suites: int
    clipped_negative: int  # added rows whose negative score was raised to 0 (the paper's rule)


@dataclass(frozen=True)
class _Row:
    line: int
    run_id: str
    environment: str
    agent: str
    model: str | None
    budget_s: float
    score: float
    clipped: bool
    cost_usd: float | None = None  # METR's `dollar_equivalent` (its file has it for human runs only)

    def same_run(self, other: _Row) -> bool:
        """Whether two lines describe the same run identically (a repeated line, not a conflict)."""
        return (self.environment, self.agent, self.model, self.budget_s, self.score) == (
            other.environment,
            other.agent,
            other.model,
            other.budget_s,
            other.score,
        )


class MalformedRow(RebenchError):
    def __init__(self, path: Path, line: int, field: str, problem: str) -> None:
        super().__init__(f"{path}: line {line}: field {field!r}: {problem}; nothing was imported")


def _number(path: Path, line: int, record: dict[str, Any], field: str) -> float:
    if field not in record:
        raise MalformedRow(path, line, field, "missing")
    value = record[field]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedRow(path, line, field, f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise MalformedRow(path, line, field, f"expected a finite number, got {value!r}")
    return float(value)


def _text(path: Path, line: int, record: dict[str, Any], field: str) -> str:
    value = record.get(field)
    if not isinstance(value, str) or not value.strip():
        raise MalformedRow(path, line, field, "missing" if field not in record else f"expected text, got {value!r}")
    return value.strip()


def _run_id(path: Path, line: int, record: dict[str, Any]) -> str:
    """METR's run id as text: a string for agent runs, a small integer for human baselines."""
    value = record.get("run_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    problem = "missing" if "run_id" not in record else f"expected text or a whole number, got {value!r}"
    raise MalformedRow(path, line, "run_id", problem)


def _family(path: Path, line: int, record: dict[str, Any]) -> str | None:
    """The task family, or None for rows of other METR suites (which are skipped)."""
    family = record.get("task_family")
    if family is None:
        task_id = record.get("task_id")
        if not isinstance(task_id, str):
            raise MalformedRow(path, line, "task_family", "missing (and no task_id to derive it from)")
        family = task_id.split("/", 1)[0]
    if not isinstance(family, str):
        raise MalformedRow(path, line, "task_family", f"expected text, got {family!r}")
    return family if family.startswith(METR_FAMILY_PREFIX) else None


def known_families(info: EnvironmentInfo) -> list[str]:
    """The RE-Bench task families an import accepts: the seven of the paper plus any an environment folder claims."""
    families = {env.metr_task_family for env in RE_BENCH_ENVIRONMENTS}
    for name in info.names():
        folder = info.folder(name)
        if folder is not None and folder.metadata.metr_task_family:
            families.add(folder.metadata.metr_task_family)
    return sorted(families)


def _read_text(path: Path) -> tuple[str, str]:
    """The file's text and sha256; a missing file, a folder or bytes that are not UTF-8 are one-line errors."""
    if path.is_dir():
        raise RebenchError(f"{path} is a directory; expected a file: {EXPECTED}")
    if not path.is_file():
        raise RebenchError(f"{path}: no such file; expected {EXPECTED}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RebenchError(f"{path}: cannot read it ({exc.strerror}); expected {EXPECTED}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise RebenchError(
            f"{path}: line {line}, column {column}: byte 0x{data[exc.start]:02x} is not UTF-8; "
            f"expected {EXPECTED}; nothing was imported"
        ) from None
    return text, hashlib.sha256(data).hexdigest()


def _excerpt(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _parse_lines(path: Path, text: str, info: EnvironmentInfo) -> tuple[list[_Row], int]:
    rows: dict[str, _Row] = {}
    skipped = 0
    families: list[str] | None = None
    for line, line_text in enumerate(text.split("\n"), start=1):  # not splitlines: JSON text may hold U+2028
        if not line_text.strip():
            continue
        try:
            record = json.loads(line_text)
        except json.JSONDecodeError as exc:
            raise RebenchError(
                f"{path}: line {line}: not valid JSON ({exc.msg} at column {exc.colno}): {_excerpt(line_text)}; "
                "each line must be one JSON object; nothing was imported"
            ) from None
        if not isinstance(record, dict):
            raise RebenchError(
                f"{path}: line {line}: expected a JSON object, got {_excerpt(line_text)}; nothing was imported"
            )
        family = _family(path, line, record)
        if family is None:
            skipped += 1
            continue
        families = families if families is not None else known_families(info)
        if family not in families:
            raise MalformedRow(
                path, line, "task_family", f"unknown RE-Bench task family {family!r}; allowed: {', '.join(families)}"
            )
        row = _parse_row(path, line, record, info.name_for_family(family))
        earlier = rows.get(row.run_id)
        if earlier is None:
            rows[row.run_id] = row
        elif not earlier.same_run(row):
            raise MalformedRow(
                path, line, "run_id", f"run {row.run_id!r} already appears on line {earlier.line} with other values"
            )
    return list(rows.values()), skipped


def _parse_row(path: Path, line: int, record: dict[str, Any], environment: str) -> _Row:
    run_id = _run_id(path, line, record)
    agent = _text(path, line, record, "alias")
    time_limit = _number(path, line, record, "time_limit")
    if time_limit < 0:
        raise MalformedRow(path, line, "time_limit", f"must be 0 (human) or positive seconds, got {time_limit}")
    score = _number(path, line, record, "score")
    if time_limit == 0:
        agent, budget_s = HUMAN_AGENT, HUMAN_ATTEMPT_S
    else:
        budget_s = time_limit
    model = record.get("model")
    return _Row(
        line=line,
        run_id=run_id,
        environment=environment,
        agent=agent,
        model=str(model) if model is not None else None,
        budget_s=budget_s,
        score=max(0.0, score),  # the paper's rule: below the start counts as 0
        clipped=score < 0,
        cost_usd=_dollars(path, line, record),
    )


def _dollars(path: Path, line: int, record: dict[str, Any]) -> float | None:
    """`dollar_equivalent` when given (null or absent: not recorded); a negative cost is malformed."""
    if record.get("dollar_equivalent") is None:
        return None
    value = _number(path, line, record, "dollar_equivalent")
    if value < 0:
        raise MalformedRow(path, line, "dollar_equivalent", f"must be 0 or more dollars, got {value}")
    return value


def parse_metr_runs(path: Path, info: EnvironmentInfo) -> tuple[list[_Row], int]:
    """Validate every line; return the RE-Bench rows (one per run id) and how many other-suite rows were skipped."""
    text, _ = _read_text(Path(path))
    return _parse_lines(Path(path), text, info)


@dataclass(frozen=True)
class MetrExport:
    """A validated export, ready to store: nothing is written until every line has passed."""

    path: Path
    sha256: str
    rows: list[_Row]
    skipped_other_suites: int


def read_metr_runs(path: Path, info: EnvironmentInfo | None = None, *, allow_empty: bool = False) -> MetrExport:
    """Read and validate METR's export; a file without RE-Bench rows is an error unless `allow_empty`.

    An empty result is almost always the wrong file, and "imported 0" would hide that.
    """
    path = Path(path)
    text, sha256 = _read_text(path)
    rows, skipped = _parse_lines(path, text, info or default_info())
    if not rows and not allow_empty:
        if skipped == 0:
            raise RebenchError(f"{path}: the file has no rows; expected {EXPECTED}; {ALLOW_EMPTY_HINT}")
        raise RebenchError(
            f"{path}: none of its {skipped} rows is a RE-Bench run (task family {METR_FAMILY_PREFIX}*); "
            f"{ALLOW_EMPTY_HINT}"
        )
    return MetrExport(path=path, sha256=sha256, rows=rows, skipped_other_suites=skipped)


def store_metr_runs(store: Store, export: MetrExport) -> ImportSummary:
    """Write a validated export as one transaction; runs already imported (by run id) are left alone."""
    try:
        new = _store_rows(store, export.sha256, export.rows)
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None)
        reason = str(orig) if orig is not None else type(exc).__name__
        raise RebenchError(f"{export.path}: could not write the import ({reason}); nothing was imported") from None
    return ImportSummary(
        path=str(export.path),
        sha256=export.sha256,
        added=len(new),
        already_present=len(export.rows) - len(new),
        skipped_other_suites=export.skipped_other_suites,
        clipped_negative=sum(row.clipped for row in new),
    )


def import_metr_runs(
    store: Store, path: Path, info: EnvironmentInfo | None = None, *, allow_empty: bool = False
) -> ImportSummary:
    """Validate METR's export whole, then store its runs not imported before."""
    return store_metr_runs(store, read_metr_runs(path, info, allow_empty=allow_empty))


def _store_rows(store: Store, sha256: str, rows: list[_Row]) -> list[_Row]:
    """Insert the runs not imported before (by run id), in one transaction; return them."""
    with store.session() as session:
        present = set(
            session.scalars(
                select(Attempt.external_id).where(Attempt.source == IMPORTED_SOURCE, Attempt.external_id.is_not(None))
            )
        )
        new = [row for row in rows if row.run_id not in present]
        session.add_all(
            Attempt(
                source=IMPORTED_SOURCE,
                environment=row.environment,
                profile=IMPORTED_PROFILE,
                agent=row.agent,
                model=row.model,
                budget_s=row.budget_s,
                status="done",
                counted=True,
                submitted=True,
                final_raw=None,
                final_normalized=row.score,
                cost_usd=row.cost_usd or 0.0,  # 0: not recorded (the report leaves such runs off its money plot)
                anchors_kind="imported",
                network=NetworkPolicy.FULL,  # RE-Bench gave every task full internet access
                import_sha256=sha256,
                import_row=row.line,
                external_id=row.run_id,
            )
            for row in new
        )
    return new
