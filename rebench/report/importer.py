"""Importing METR's run-level export (JSON Lines) as imported attempts.

Only RE-Bench rows (task family `ai_rd_*`) are kept. Each becomes one finished
attempt with its provenance: the file's sha256 and the row's line number, which
are unique together in the store, so importing the same file twice adds nothing.
The whole import is one transaction: a malformed row stops it with the line and
field, and nothing of that import is kept.
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
from rebench.report.known_environments import METR_FAMILY_PREFIX, EnvironmentInfo, default_info
from rebench.store import Attempt, Store

HUMAN_AGENT = "human"
HUMAN_ATTEMPT_S = 28800.0  # one 8 h attempt: METR writes time_limit 0 for humans
IMPORTED_PROFILE = "paper"


class ImportSummary(BaseModel):
    """What one import did, for the CLI to print."""

    path: str
    sha256: str
    added: int
    already_present: int
    skipped_other_suites: int


@dataclass(frozen=True)
class _Row:
    line: int
    environment: str
    agent: str
    model: str | None
    budget_s: float
    score: float
    external_id: str | None


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


def parse_metr_runs(path: Path, info: EnvironmentInfo) -> tuple[list[_Row], int]:
    """Validate every line; return the RE-Bench rows and how many other-suite rows were skipped."""
    rows: list[_Row] = []
    skipped = 0
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RebenchError(f"{path}: line {line}: not valid JSON ({exc.msg}); nothing was imported") from None
            if not isinstance(record, dict):
                raise RebenchError(f"{path}: line {line}: expected a JSON object; nothing was imported")
            family = _family(path, line, record)
            if family is None:
                skipped += 1
                continue
            try:
                environment = info.name_for_family(family)
            except RebenchError as exc:
                raise MalformedRow(path, line, "task_family", str(exc)) from None
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
            run_id = record.get("run_id")
            rows.append(
                _Row(
                    line=line,
                    environment=environment,
                    agent=agent,
                    model=str(model) if model is not None else None,
                    budget_s=budget_s,
                    score=max(0.0, score),  # the paper's rule: below the start counts as 0
                    external_id=str(run_id) if run_id is not None else None,
                )
            )
    return rows, skipped


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def import_metr_runs(store: Store, path: Path, info: EnvironmentInfo | None = None) -> ImportSummary:
    """Import METR's export into `store` as one transaction; rows already imported are left alone."""
    path = Path(path)
    if not path.is_file():
        raise RebenchError(f"{path}: no such file (expected METR's run-level export, JSON Lines)")
    sha256 = file_sha256(path)
    rows, skipped = parse_metr_runs(path, info or default_info())
    try:
        new = _store_rows(store, sha256, rows)
    except SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None)
        reason = str(orig) if orig is not None else type(exc).__name__
        raise RebenchError(f"{path}: could not write the import ({reason}); nothing was imported") from None
    return ImportSummary(
        path=str(path),
        sha256=sha256,
        added=len(new),
        already_present=len(rows) - len(new),
        skipped_other_suites=skipped,
    )


def _store_rows(store: Store, sha256: str, rows: list[_Row]) -> list[_Row]:
    """Insert the rows not imported before, in one transaction; return them."""
    with store.session() as session:
        present = set(session.scalars(select(Attempt.import_row).where(Attempt.import_sha256 == sha256)))
        new = [row for row in rows if row.line not in present]
        session.add_all(
            Attempt(
                source="imported",
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
                anchors_kind="imported",
                import_sha256=sha256,
                import_row=row.line,
                external_id=row.external_id,
            )
            for row in new
        )
    return new
