"""Results as pandas DataFrames, for notebooks: attempts, score events, events, model calls, score@k.

    from rebench import analysis

    runs = analysis.attempts("results/rebench.db")
    rows = analysis.score_at_k("results/rebench.db", agents=["reference"])   # = `rebench report --json`

Every frame has the same columns and dtypes whatever it holds (an empty database gives
empty frames, not missing columns); docs/analysis.md describes each column. Text columns
are pandas' nullable `string` dtype, counts `int64`, nullable ids `Int64`, times
`datetime64[ns, UTC]`; JSON payloads stay Python dicts (`object`). The frames read the
database; nothing here writes to it.
"""

from __future__ import annotations

import importlib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from rebench.errors import RebenchError

if TYPE_CHECKING:
    from rebench.report.rows import Report
    from rebench.store.db import Store

TableFormat = Literal["csv", "parquet"]
FORMATS: tuple[TableFormat, ...] = ("csv", "parquet")
PARQUET_HINT = "pip install 'rebench[report]' (it brings pyarrow)"

UTC_TIME = "datetime64[ns, UTC]"

ATTEMPT_COLUMNS: dict[str, str] = {
    "attempt_id": "int64", "campaign_id": "Int64", "source": "string", "environment": "string",
    "env_version": "string", "profile": "string", "agent": "string", "model": "string", "budget_s": "float64",
    "seed": "int64", "backend": "string", "network": "string", "status": "string", "error_source": "string",
    "error_message": "string", "limit_reason": "string", "submitted": "bool", "counted": "bool",
    "retry_of": "Int64", "final_raw": "float64", "final_normalized": "float64", "anchors_kind": "string",
    "working_s": "float64", "wall_s": "float64", "model_wait_s": "float64", "input_tokens": "int64",
    "output_tokens": "int64", "cached_tokens": "int64", "cost_usd": "float64", "created_at": UTC_TIME,
    "started_at": UTC_TIME, "ended_at": UTC_TIME, "snapshot_path": "string", "external_id": "string",
    "calls_per_hour": "float64", "heldout_normalized": "float64", "best_intermediate": "float64",
    "heldout_gap": "float64", "probing": "boolean", "heldout_anchors": "string", "heldout_solution": "string",
    "heldout_fallback": "string",
}
_HELDOUT_COLUMNS = ("calls_per_hour", "heldout_normalized", "best_intermediate", "heldout_gap", "probing",
                    "heldout_anchors", "heldout_solution", "heldout_fallback")
SCORE_EVENT_COLUMNS: dict[str, str] = {
    "score_event_id": "int64", "attempt_id": "int64", "kind": "string", "working_s": "float64",
    "raw": "float64", "valid": "bool", "duration_s": "float64", "created_at": UTC_TIME,
    "message": "object", "details": "object",
}
EVENT_COLUMNS: dict[str, str] = {
    "event_id": "int64", "attempt_id": "int64", "seq": "int64", "kind": "string", "working_s": "float64",
    "duration_s": "float64", "created_at": UTC_TIME, "data": "object",
}
MODEL_CALL_COLUMNS: dict[str, str] = {
    "event_id": "int64", "attempt_id": "int64", "seq": "int64", "working_s": "float64", "model": "string",
    "input_tokens": "int64", "output_tokens": "int64", "cached_tokens": "int64", "cache_write_tokens": "int64",
    "cost_usd": "float64", "price_known": "boolean", "wait_s": "float64", "retries": "int64",
    "retry_wait_s": "float64", "stop_reason": "string", "response_model": "string", "tool_calls": "int64",
    "text": "string",
}


def _pandas_dtype(annotation: Any) -> str:
    """The frame dtype of one ScoreRow field: its Python type, NaN standing for None in floats."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = args[0]
    return {str: "string", float: "float64", int: "int64", bool: "bool"}[annotation]


def score_row_columns() -> dict[str, str]:
    """Columns and dtypes of the score@k frame: one per ScoreRow field (rebench.report.rows)."""
    from rebench.report.rows import ScoreRow

    return {name: _pandas_dtype(field.annotation) for name, field in ScoreRow.model_fields.items()}


def _optional_score_fields() -> set[str]:
    """ScoreRow fields that may be None (CSV writes None as an empty cell)."""
    from rebench.report.rows import ScoreRow

    return {name for name, field in ScoreRow.model_fields.items() if not field.is_required() and field.default is None}


def _frame(records: Iterable[Mapping[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    """A frame with exactly `columns`, in order and with their dtypes, even when empty."""
    frame = pd.DataFrame.from_records(list(records), columns=list(columns))
    for name, dtype in columns.items():
        if dtype == UTC_TIME:
            frame[name] = pd.to_datetime(frame[name], utc=True).astype(UTC_TIME)
        elif dtype == "object":
            frame[name] = frame[name].astype(object)
        else:
            frame[name] = frame[name].astype(dtype)
    return frame


@contextmanager
def _reading(db: Store | Path | str | None) -> Iterator[Store]:
    """An existing database only: reading a mistyped path must not leave an empty database behind."""
    from rebench.api import using_store
    from rebench.store.db import Store, default_db_path

    if not isinstance(db, Store):
        path = Path(db) if db is not None else default_db_path()
        if not path.is_file():
            raise RebenchError(f"no database at {str(path)!r}: run a campaign or import results first, "
                               "or pass the path of one")
        db = path
    with using_store(db, read_only=True) as store:
        yield store


def attempts(db: Store | Path | str | None = None, *, source: str | None = None) -> pd.DataFrame:
    """One row per attempt, own and imported, retries included (`counted` False marks a retried failure).

    `final_normalized` is as stored when the attempt ended; `score_at_k` re-normalizes own
    attempts with the anchors in force now (a re-scored timing: its re-scoring window's).
    `source`: only `own` or only `imported` attempts.
    """
    from sqlalchemy import select

    from rebench.report.data import SOURCES
    from rebench.store.models import Attempt

    if source is not None and source not in SOURCES:
        raise RebenchError(f"unknown source {source!r}; allowed: {', '.join(SOURCES)}")
    query = select(Attempt).order_by(Attempt.id)
    if source is not None:
        query = query.where(Attempt.source == source)
    with _reading(db) as store, store.session() as session:
        rows = list(session.scalars(query))
        heldout = _heldout_details(store, session, rows)
        records = [
            {"attempt_id": a.id, **{c: getattr(a, c) for c in ATTEMPT_COLUMNS
                                    if c != "attempt_id" and c not in _HELDOUT_COLUMNS}, **heldout.get(a.id, {})}
            for a in rows
        ]
    return _frame(records, ATTEMPT_COLUMNS)


def _heldout_details(store: Store, session: Any, rows: list[Any]) -> dict[int, dict[str, Any]]:
    """Per own attempt, what `attempts show` prints of its held-out final (rebench.report.heldout):
    score calls per working hour and, where its profile declares `final_split`, the held-out final
    and best intermediate score (normalized), their gap, the probing flag, and which solution it scored
    (`best_call` or `final`, with the reason where `best` fell back to the final one)."""
    from sqlalchemy import select

    from rebench.report.heldout import attempt_detail
    from rebench.store.models import ScoreEvent

    own = [a for a in rows if a.source == "own"]
    if not own:
        return {}
    events: dict[int, list[Any]] = {}
    for event in session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id.in_([a.id for a in own]))
                                 .order_by(ScoreEvent.id)):
        events.setdefault(event.attempt_id, []).append(event)
    specs: dict[tuple[str, str], Any] = {}
    out = {}
    for attempt in own:
        fields = attempt_detail(store, attempt, events.get(attempt.id, []), specs)
        final = fields.get("heldout_score")
        out[attempt.id] = {
            "calls_per_hour": fields.get("calls_per_hour"), "heldout_normalized": final,
            "best_intermediate": fields.get("best_intermediate"), "heldout_gap": fields.get("gap"),
            "probing": fields.get("probing") if final is not None else None,
            "heldout_anchors": fields.get("heldout_anchors"), "heldout_solution": fields.get("heldout_solution"),
            "heldout_fallback": fields.get("heldout_fallback")}
    return out


def score_events(db: Store | Path | str | None = None) -> pd.DataFrame:
    """One row per score call of an own attempt: `baseline` (the starting solution, scored in a pause),
    `intermediate` (the agent's calls) and, under rescore_best, `rescore` and the window's
    `anchor_start`/`anchor_reference` (rebench.scoring.window); `raw` is NaN when the call was invalid."""
    from sqlalchemy import select

    from rebench.store.models import ScoreEvent

    with _reading(db) as store, store.session() as session:
        records = [
            {"score_event_id": s.id, **{c: getattr(s, c) for c in SCORE_EVENT_COLUMNS if c != "score_event_id"}}
            for s in session.scalars(select(ScoreEvent).order_by(ScoreEvent.id))
        ]
    return _frame(records, SCORE_EVENT_COLUMNS)


def _event_rows(db: Store | Path | str | None, kinds: Iterable[str] | None) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from rebench.store.models import Event

    query = select(Event).order_by(Event.attempt_id, Event.seq)
    if kinds is not None:
        query = query.where(Event.kind.in_(list(kinds)))
    with _reading(db) as store, store.session() as session:
        return [{"event_id": e.id, **{c: getattr(e, c) for c in EVENT_COLUMNS if c != "event_id"}}
                for e in session.scalars(query)]


def events(db: Store | Path | str | None = None, *, kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """The event log (the audit and replay record) of every own attempt, in order: one row per
    tool call, model call, score, pause-worthy note; `data` is the event's payload as a dict.
    `kinds`: only events of these kinds (e.g. ["bash", "score"])."""
    return _frame(_event_rows(db, kinds), EVENT_COLUMNS)


def model_calls(db: Store | Path | str | None = None) -> pd.DataFrame:
    """One row per model call of an LLM agent: tokens, cost, request time, retries, and what the
    model said (`text`, and `tool_calls`: how many tools it called). Full transcripts are in `events`."""
    records = []
    for row in _event_rows(db, ["model_call"]):
        data: dict[str, Any] = row["data"] or {}
        extra = {**data, **(data.get("extra") or {})}  # usage fields at the top, provider details in `extra`
        records.append({
            "event_id": row["event_id"], "attempt_id": row["attempt_id"], "seq": row["seq"],
            "working_s": row["working_s"], "model": data.get("model"),
            **{c: int(extra.get(c) or 0)
               for c in ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens", "retries")},
            "cost_usd": float(data.get("cost_usd") or 0.0), "price_known": extra.get("price_known"),
            "wait_s": float(data.get("wait_s") or 0.0), "retry_wait_s": float(extra.get("retry_wait_s") or 0.0),
            "stop_reason": extra.get("stop_reason"), "response_model": extra.get("response_model"),
            "tool_calls": len(data.get("tool_calls") or []), "text": data.get("text"),
        })
    return _frame(records, MODEL_CALL_COLUMNS)


def score_rows(report: Report | None) -> pd.DataFrame:
    """A report's score@k rows (the rows of `rebench report --json`), one column per ScoreRow field."""
    rows = [] if report is None else [row.model_dump() for row in report.rows]
    return _frame(rows, score_row_columns())


def score_at_k(db: Store | Path | str | None = None, **options: Any) -> pd.DataFrame:
    """Score@k rows with bootstrap intervals, the same numbers as `rebench report --json`.

    `options` are rebench.api.report's (filters `campaigns`, `environments`, `agents`, `source`;
    `estimator`, `n_bootstrap`, `seed`, `budgets`, `at`, `exclude_above`). Empty when nothing matches.
    """
    from rebench.api import report

    with _reading(db) as store:
        return score_rows(report(store, **options))


def check_format(fmt: str) -> None:
    """A one-line error for an unknown format, or parquet without pyarrow, before any work is done."""
    if fmt not in FORMATS:
        raise RebenchError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "parquet":
        _require_pyarrow("writing")


def _require_pyarrow(doing: str) -> None:
    try:
        importlib.import_module("pyarrow")
    except ImportError:
        raise RebenchError(f"{doing} parquet needs pyarrow, which is not installed: {PARQUET_HINT}") from None


def write_score_rows(report: Report | None, path: Path, fmt: str) -> Path:
    """Write the score@k rows as `csv` (the same text as the report's score_at_k.csv) or `parquet`.

    An existing folder gets score_at_k.csv or score_at_k.parquet inside it. The file is
    replaced whole (written beside it, then renamed), never left half-written.
    """
    check_format(fmt)
    path = Path(path)
    if path.is_dir():
        path = path / f"score_at_k.{fmt}"
    if not path.parent.is_dir():
        raise RebenchError(f"cannot write {str(path)!r}: its folder does not exist")
    tmp = path.with_name(path.name + ".tmp")
    if fmt == "csv":
        from rebench.report.render import score_rows_csv

        tmp.write_text(score_rows_csv(report), encoding="utf-8")
    else:
        score_rows(report).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def read_score_rows(path: Path | str) -> pd.DataFrame:
    """Read a file written by `write_score_rows` (or `rebench report --format csv|parquet`) back
    with the same columns and dtypes as `score_rows`."""
    path = Path(path)
    columns = score_row_columns()
    if path.suffix == ".parquet":
        _require_pyarrow("reading")
        raw = pd.read_parquet(path)
    else:
        exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}  # 3: the default
        # an empty cell is a missing value, except in a string column that cannot be missing (there: "")
        missing = {n for n, d in columns.items() if d != "string" or n in _optional_score_fields()}
        raw = pd.read_csv(path, dtype={n: d for n, d in columns.items() if d == "string"},
                          keep_default_na=False, na_values={n: [""] for n in missing}, **exact)
    return _frame(raw.to_dict("records"), columns)
