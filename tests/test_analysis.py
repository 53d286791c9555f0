"""rebench.analysis: DataFrames read back from databases that real runs wrote, checked against the
rows in SQLite and against `rebench report --json`; `report --format csv|parquet` files round-trip.

The own-attempts database comes from real tiny campaigns through rebench.api: the replay agent
on the `counter` fixture environment (local backend), and the modular agent talking to the fake
model server through the real openai SDK (for model calls). The imported one is METR's public export.
"""

from __future__ import annotations

import json
import math
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rebench import analysis, api
from rebench.errors import RebenchError
from tests.conftest import run_main
from tests.model_fixtures import call, replay_attempts_then_server

METR_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"
REPORT_OPTIONS = ["--n-bootstrap", "50", "--budgets", "1m,2m,30m,2h", "--at", "2m"]
API_OPTIONS: dict[str, Any] = {"n_bootstrap": 50, "budgets": "1m,2m,30m,2h", "at": "2m"}


def sql(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


@pytest.fixture(scope="module")
def own_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two replay attempts (a valid, an invalid and a valid score call) and one modular-agent attempt
    whose model calls go to the fake server with known token counts."""
    root = tmp_path_factory.mktemp("analysis")
    with replay_attempts_then_server(root) as (db, server):
        server.add(
            {"tool_calls": [call("bash", command="echo 9 > value.txt")],
             "usage": {"input_tokens": 300, "output_tokens": 40, "cached_tokens": 100}},
            {"tool_calls": [call("score")], "usage": {"input_tokens": 500, "output_tokens": 30}},
            {"text": "done", "tool_calls": [call("submit")], "usage": {"input_tokens": 700, "output_tokens": 20}},
        )
        agent = api.AgentConfig(name="modular", model="openai/scripted", base_url=server.openai_url)
        api.run_campaign(api.CampaignSpec(environments=["counter"], budget_s="2m", backend="local", agent=agent),
                         db=db)
        yield db


@pytest.fixture
def own_envs(own_db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The environments the own attempts ran on: the report normalizes with their anchors."""
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(own_db.parent / "envs"))
    return own_db


def assert_columns(frame: pd.DataFrame, columns: dict[str, str]) -> None:
    assert list(frame.columns) == list(columns)
    for name, dtype in columns.items():
        assert frame[name].dtype == pd.api.types.pandas_dtype(dtype), (name, frame[name].dtype, dtype)


def test_attempts_frame_is_the_attempts_table(own_db: Path) -> None:
    frame = analysis.attempts(own_db)
    assert_columns(frame, analysis.ATTEMPT_COLUMNS)
    stored = sql(own_db, "select id, campaign_id, agent, status, final_raw, input_tokens, cost_usd, submitted "
                         "from attempts order by id")
    assert [tuple(r) for r in frame[["attempt_id", "campaign_id", "agent", "status", "final_raw", "input_tokens",
                                     "cost_usd", "submitted"]].itertuples(index=False)] == stored
    assert frame["ended_at"].notna().all() and (frame["ended_at"] >= frame["started_at"]).all()
    assert analysis.attempts(own_db, source="imported").empty
    with pytest.raises(RebenchError, match="unknown source 'theirs'; allowed: own, imported"):
        analysis.attempts(own_db, source="theirs")


def test_score_events_keep_invalid_calls_as_nan(own_db: Path) -> None:
    frame = analysis.score_events(own_db)
    assert_columns(frame, analysis.SCORE_EVENT_COLUMNS)
    stored = sql(own_db, "select id, attempt_id, kind, raw, valid from score_events order by id")
    assert len(frame) == len(stored)
    for row, (event_id, attempt_id, kind, raw, valid) in zip(frame.itertuples(), stored, strict=True):
        assert (row.score_event_id, row.attempt_id, row.kind, row.valid) == (event_id, attempt_id, kind, bool(valid))
        assert math.isnan(row.raw) if raw is None else row.raw == raw
    replayed = frame[(frame.attempt_id == 1) & (frame.kind == "intermediate")]
    assert replayed["raw"].isna().tolist() == [False, True, False]


def test_events_are_the_event_log_in_order(own_db: Path) -> None:
    frame = analysis.events(own_db)
    assert_columns(frame, analysis.EVENT_COLUMNS)
    stored = sql(own_db, "select attempt_id, seq, kind, data from events order by attempt_id, seq")
    assert [(r.attempt_id, r.seq, r.kind, r.data) for r in frame.itertuples()] == \
        [(a, s, k, json.loads(d)) for a, s, k, d in stored]
    scores = analysis.events(own_db, kinds=["score"])
    assert set(scores["kind"]) == {"score"} and len(scores) == sum(k == "score" for _, _, k, _ in stored)


def test_model_calls_add_up_to_the_attempts_usage(own_db: Path) -> None:
    calls = analysis.model_calls(own_db)
    assert_columns(calls, analysis.MODEL_CALL_COLUMNS)
    assert calls["input_tokens"].tolist() == [300, 500, 700]
    assert calls["output_tokens"].tolist() == [40, 30, 20] and calls["cached_tokens"].tolist() == [100, 0, 0]
    assert calls["tool_calls"].tolist() == [1, 1, 1] and calls["model"].unique().tolist() == ["openai/scripted"]
    assert calls["price_known"].all()
    (attempt_id,) = calls["attempt_id"].unique()
    [(tokens_in, tokens_out, cost)] = sql(own_db, "select input_tokens, output_tokens, cost_usd from attempts "
                                                  f"where id = {attempt_id}")
    assert (calls["input_tokens"].sum(), calls["output_tokens"].sum()) == (tokens_in, tokens_out)
    assert calls["cost_usd"].sum() == pytest.approx(cost) and cost > 0


def report_json(db: Path, capsys: pytest.CaptureFixture[str], *options: str) -> list[dict[str, Any]]:
    code, out, err = run_main(["report", "--json", "--db", str(db), *options], capsys)
    assert code == 0, err
    return json.loads(out)


def assert_same_rows(frame: pd.DataFrame, rows: list[dict[str, Any]]) -> None:
    """Frame records equal the JSON rows; NaN in the frame is null in the JSON."""
    records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
               for r in frame.to_dict("records")]
    assert records == rows and rows


def test_score_at_k_equals_report_json_for_own_attempts(own_envs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame = analysis.score_at_k(own_envs, **API_OPTIONS)
    assert_columns(frame, analysis.score_row_columns())
    assert_same_rows(frame, report_json(own_envs, capsys, *REPORT_OPTIONS))
    assert set(frame["agent"]) == {"replay", "modular/openai/scripted"}


@pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl")
def test_score_at_k_equals_report_json_for_metr_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "metr.db"
    summary = api.import_metr_runs(METR_FILE, db=db)
    attempts = analysis.attempts(db, source="imported")
    assert len(attempts) == summary.added and attempts["anchors_kind"].eq("imported").all()
    options = ["--n-bootstrap", "20", "--agent", "Claude 3.5 Sonnet (New)"]
    frame = analysis.score_at_k(db, n_bootstrap=20, agents=["Claude 3.5 Sonnet (New)"])
    assert {"human", "Claude 3.5 Sonnet (New)"} <= set(frame["agent"])
    assert_same_rows(frame, report_json(db, capsys, *options))


def test_report_files_round_trip(own_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = analysis.score_at_k(own_envs, **API_OPTIONS)
    parquet, csv = tmp_path / "rows.parquet", tmp_path / "rows.csv"
    for fmt, path in (("parquet", parquet), ("csv", csv)):
        code, out, err = run_main(["report", "--db", str(own_envs), *REPORT_OPTIONS, "--format", fmt,
                                   "--out", str(path)], capsys)
        assert code == 0 and out.strip() == f"wrote {path}", err
        pd.testing.assert_frame_equal(analysis.read_score_rows(path), expected)
    assert pd.read_parquet(parquet)["point"].tolist() == expected["point"].tolist()
    code, out, _ = run_main(["report", "--db", str(own_envs), *REPORT_OPTIONS, "--format", "csv"], capsys)
    assert code == 0 and out == csv.read_text()
    bundle = tmp_path / "bundle"
    code, _, _ = run_main(["report", "--db", str(own_envs), *REPORT_OPTIONS, "--out", str(bundle)], capsys)
    assert code == 0 and (bundle / "score_at_k.csv").read_text() == csv.read_text()
    code, out, _ = run_main(["report", "--db", str(own_envs), *REPORT_OPTIONS, "--format", "parquet",
                             "--out", str(bundle)], capsys)
    assert code == 0 and out.strip() == f"wrote {bundle / 'score_at_k.parquet'}"


BAD_FORMATS = [
    (["--format", "xlsx"], "invalid --format 'xlsx'; allowed: table, csv, parquet"),
    (["--format", "parquet"], "--format parquet writes a binary file: give --out FILE"),
    (["--format", "csv", "--json"], "--json and --format csv"),
    (["--format", "csv", "--out", "/nonexistent-dir/rows.csv"], "its folder does not exist"),
]


@pytest.mark.parametrize(("args", "message"), BAD_FORMATS, ids=[m for _, m in BAD_FORMATS])
def test_bad_format_options_are_one_line_errors(own_envs: Path, capsys: pytest.CaptureFixture[str],
                                                args: list[str], message: str) -> None:
    code, out, err = run_main(["report", "--db", str(own_envs), *args], capsys)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_parquet_without_pyarrow_names_the_extra(own_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow is installed here; blocking its import stands in for an install without the extra."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    target = tmp_path / "rows.parquet"
    code, _, err = run_main(["report", "--db", str(own_envs), "--format", "parquet", "--out", str(target)], capsys)
    assert code == 2 and not target.exists()
    assert err.strip() == ("error: writing parquet needs pyarrow, which is not installed: "
                           "pip install 'rebench[report]' (it brings pyarrow)")


def test_an_empty_database_gives_empty_frames_and_a_missing_one_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.db"
    api.open_store(empty).close()
    assert analysis.attempts(empty).empty and analysis.model_calls(empty).empty
    assert_columns(analysis.score_at_k(empty), analysis.score_row_columns())
    code, out, _ = run_main(["report", "--db", str(empty), "--format", "csv"], capsys)
    assert code == 0 and out == ",".join(analysis.score_row_columns()) + "\n"  # the header, for scripts
    missing = tmp_path / "typo.db"
    with pytest.raises(RebenchError, match="no database at"):
        analysis.events(missing)
    assert not missing.exists()


@pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl")
def test_a_filter_that_matches_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--agent nope` and `--campaign 999` used to print a humans-only report and exit 0, and `--env nope`
    failed without naming it; the API answered with human rows where the docs promise an empty frame."""
    db = tmp_path / "metr.db"
    api.import_metr_runs(METR_FILE, db=db)
    for option, value, what in (("--agent", "nope", "agent"), ("--campaign", "999", "campaign"),
                                ("--env", "nope", "environment")):
        code, out, err = run_main(["report", "--db", str(db), option, value], capsys)
        assert code == 2 and out == "", err
        (line,) = err.strip().splitlines()
        assert f"no attempts of {what} " in line and value in line, line
    code, _, err = run_main(["report", "--db", str(db), "--agent", "nope"], capsys)
    assert "Claude 3.5 Sonnet (New)" in err  # the agents that do exist are named
    assert analysis.score_at_k(db, n_bootstrap=20, agents=["nope"]).empty
    assert analysis.score_at_k(db, n_bootstrap=20, campaigns=[999]).empty
