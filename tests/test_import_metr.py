"""Importing METR's run-level export into a real SQLite store."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from rebench.errors import RebenchError
from rebench.report.importer import import_metr_runs
from rebench.store import Attempt, Store

from .conftest import run_main

METR_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"


def _row(**overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "run_id": "r1",
        "task_id": "ai_rd_triton_cumsum/main",
        "task_family": "ai_rd_triton_cumsum",
        "alias": "o1-preview",
        "model": "o1-p",
        "time_limit": 1800,
        "score": 0.25,
    }
    row.update(overrides)
    return row


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _count(store: Store) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count()).select_from(Attempt)) or 0)


@pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl")
def test_import_real_export_is_idempotent(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    first = import_metr_runs(store, METR_FILE)
    assert (first.added, first.already_present, first.skipped_other_suites) == (1808, 0, 5251)
    assert first.sha256 == "90805f0db2b7743a5cffc90d453d82f9445c47f5bea0ec52146ff9b60332558d"
    second = import_metr_runs(store, METR_FILE)
    assert (second.added, second.already_present) == (0, 1808)
    assert _count(store) == 1808
    with store.session() as s:
        attempts = list(s.scalars(select(Attempt)))
    per_env = Counter(a.environment for a in attempts)
    assert per_env["triton_cumsum"] == 318 and per_env["rust_codecontests_inference"] == 330
    humans = [a for a in attempts if a.agent == "human"]
    assert len(humans) == 93 and {a.budget_s for a in humans} == {28800.0}
    per_limit = Counter((a.agent, a.budget_s) for a in attempts)
    assert per_limit[("o1-preview", 1800.0)] == 248 and per_limit[("Claude 3.5 Sonnet (New)", 28800.0)] == 3
    assert all(a.source == "imported" and a.status == "done" and a.anchors_kind == "imported" for a in attempts)
    assert len({(a.import_sha256, a.import_row) for a in attempts}) == 1808
    assert all(a.external_id for a in attempts)
    store.close()


def test_rows_map_to_attempts(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "runs.jsonl",
        [
            _row(task_family="hcast_x", task_id="hcast_x/1", alias=None),  # other suite: skipped, not checked
            _row(run_id=7, alias="human", model="human", time_limit=0, score=1.2),
            "",
            _row(task_family="ai_rd_small_scaling_law", task_id="ai_rd_small_scaling_law/main", score=-0.1),
        ],
    )
    store = Store(tmp_path / "r.db")
    summary = import_metr_runs(store, path)
    assert (summary.added, summary.skipped_other_suites) == (2, 1)
    with store.session() as s:
        attempts = list(s.scalars(select(Attempt).order_by(Attempt.import_row)))
    human, agent = attempts
    assert (human.agent, human.budget_s, human.final_normalized, human.external_id, human.import_row) == (
        "human",
        28800.0,
        1.2,
        "7",
        2,
    )
    assert (agent.environment, agent.budget_s, agent.final_normalized, agent.import_row) == (
        "small_scaling_law",
        1800.0,
        0.0,  # below the start counts as 0
        4,
    )


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (_row(score="high"), "score"),
        (_row(score=None), "score"),
        (_row(time_limit=-5), "time_limit"),
        ({k: v for k, v in _row().items() if k != "alias"}, "alias"),
        (_row(task_family=3), "task_family"),
    ],
)
def test_malformed_row_keeps_nothing(tmp_path: Path, bad: dict[str, object], field: str) -> None:
    store = Store(tmp_path / "r.db")
    import_metr_runs(store, _write(tmp_path / "earlier.jsonl", [_row(run_id="earlier")]))
    path = _write(tmp_path / "runs.jsonl", [_row(run_id="a"), _row(run_id="b"), bad, _row(run_id="d")])
    with pytest.raises(RebenchError) as info:
        import_metr_runs(store, path)
    message = str(info.value)
    assert "line 3" in message and repr(field) in message and "\n" not in message
    assert _count(store) == 1  # the earlier import stays, nothing of this one is kept


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    path = _write(tmp_path / "runs.jsonl", [_row(), "{not json"])
    with pytest.raises(RebenchError, match="line 2: not valid JSON"):
        import_metr_runs(store, path)
    with pytest.raises(RebenchError, match="no such file"):
        import_metr_runs(store, tmp_path / "absent.jsonl")
    assert _count(store) == 0


def test_write_failure_rolls_back_the_whole_import(tmp_path: Path) -> None:
    """A real SQLite trigger refuses one row mid-import; the rows before it must not stay."""
    store = Store(tmp_path / "r.db")
    with store.engine.begin() as connection:
        connection.exec_driver_sql(
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON attempts WHEN NEW.external_id = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END"
        )
    path = _write(tmp_path / "runs.jsonl", [_row(run_id="a"), _row(run_id="boom"), _row(run_id="c")])
    with pytest.raises(RebenchError, match="nothing was imported"):
        import_metr_runs(store, path)
    assert _count(store) == 0


def _environment_folder(root: Path, name: str, family: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "environment.toml").write_text(
        f'name = "{name}"\ntitle = "K"\nversion = "1"\nsummary = "s"\n'
        f'metr_task_family = "{family}"\n'
        '[profiles.tiny]\ndirection = "lower"\nfinal_score = "best"\n'
        "anchors = { start = 2.0, reference = 1.0 }\n"
    )


def test_environment_folder_names_the_family(tmp_path: Path) -> None:
    """A folder whose metadata claims a METR family wins over the built-in table, and adds to the allowed families."""
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.report.known_environments import EnvironmentInfo

    _environment_folder(tmp_path / "envs", "kernel", "ai_rd_triton_cumsum")
    _environment_folder(tmp_path / "envs", "newenv", "ai_rd_new_thing")
    info = EnvironmentInfo(EnvironmentRegistry(tmp_path / "envs"))
    path = _write(
        tmp_path / "runs.jsonl",
        [
            _row(run_id="a"),
            _row(run_id="b", task_family="ai_rd_fix_embedding"),
            _row(run_id="c", task_family="ai_rd_new_thing"),
        ],
    )
    store = Store(tmp_path / "r.db")
    import_metr_runs(store, path, info)
    with store.session() as s:
        names = list(s.scalars(select(Attempt.environment).order_by(Attempt.import_row)))
    assert names == ["kernel", "fix_embedding", "newenv"]
    bogus = _write(tmp_path / "bogus.jsonl", [_row(run_id="d", task_family="ai_rd_bogus")])
    with pytest.raises(RebenchError, match="unknown RE-Bench task family 'ai_rd_bogus'") as raised:
        import_metr_runs(store, bogus, info)
    assert "ai_rd_new_thing" in str(raised.value) and "ai_rd_fix_embedding" in str(raised.value)
    assert _count(store) == 3


def test_a_run_is_imported_once_whatever_file_it_comes_from(tmp_path: Path) -> None:
    """Identity is the run id: a subset of a file, or the same run in another file, adds nothing."""
    store = Store(tmp_path / "r.db")
    full = _write(
        tmp_path / "full.jsonl", [_row(run_id="a"), _row(run_id="b", score=0.5), _row(run_id=3, time_limit=0)]
    )
    assert import_metr_runs(store, full).added == 3
    subset = _write(
        tmp_path / "subset.jsonl", [_row(task_family="hcast_x", task_id="hcast_x/1"), _row(run_id="b", score=0.5)]
    )
    again = import_metr_runs(store, subset)
    assert (again.added, again.already_present, again.skipped_other_suites) == (0, 1, 1)
    other = _write(tmp_path / "other.jsonl", [_row(run_id="new"), _row(run_id="3", time_limit=0), _row(run_id="new")])
    third = import_metr_runs(store, other)  # "3" is the human run 3 again; "new" repeated identically counts once
    assert (third.added, third.already_present) == (1, 1)
    with store.session() as s:
        ids = sorted(s.scalars(select(Attempt.external_id)))
    assert ids == ["3", "a", "b", "new"]


def test_one_run_with_two_different_rows_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    path = _write(tmp_path / "runs.jsonl", [_row(run_id="a"), _row(run_id="b"), _row(run_id="a", score=0.9)])
    with pytest.raises(RebenchError, match="line 3: field 'run_id': run 'a' already appears on line 1"):
        import_metr_runs(store, path)
    assert _count(store) == 0


@pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl")
def test_subset_of_real_export_adds_nothing(tmp_path: Path) -> None:
    """Lines of METR's file, agent and human rows, shuffled into a second file after the whole file was imported."""
    lines = METR_FILE.read_text().splitlines()
    rebench_lines = [line for line in lines if '"task_family":"ai_rd_' in line]
    subset = rebench_lines[::97][::-1] + [line for line in lines if '"alias":"human"' in line][:5] + lines[-3:]
    path = tmp_path / "subset.jsonl"
    path.write_text("\n".join(subset) + "\n")
    store = Store(tmp_path / "r.db")
    assert import_metr_runs(store, METR_FILE).added == 1808
    summary = import_metr_runs(store, path)
    assert summary.added == 0 and summary.already_present == len(rebench_lines[::97]) + 5
    assert _count(store) == 1808


def test_upgrade_removes_repeated_runs_and_makes_run_id_unique(tmp_path: Path) -> None:
    """A database at the first schema that imported a run twice (what the old import did) upgrades cleanly."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import MetaData, Table, create_engine
    from sqlalchemy.exc import IntegrityError

    from rebench.store.schema import MIGRATIONS_DIR

    db = tmp_path / "old.db"
    engine = create_engine(f"sqlite:///{db}")
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")

    # Rows go in through the first schema's own columns: the ORM model has grown since.
    old_attempts = Table("attempts", MetaData(), autoload_with=engine)

    def row(**fields: object) -> dict[str, object]:
        values: dict[str, object] = {}
        for column in Attempt.__table__.columns:
            if column.name == "id" or column.name not in old_attempts.c:
                continue
            default = getattr(column.default, "arg", None)
            values[column.name] = fields.get(column.name, default(None) if callable(default) else default)
        return values

    def imported(run_id: str, sha: str, line: int) -> dict[str, object]:
        return row(source="imported", environment="triton_cumsum", agent="o1-preview", budget_s=1800.0,
                   status="done", final_normalized=0.25, import_sha256=sha, import_row=line, external_id=run_id)

    with engine.begin() as connection:
        connection.execute(old_attempts.insert(), [
            imported("a", "f1", 1),
            imported("b", "f1", 2),
            imported("a", "f2", 1),
            imported("b", "f3", 7),
            imported("a", "f3", 8),
            *(row(environment="counter", agent="reference", budget_s=60.0) for _ in range(2)),
        ])
    engine.dispose()

    store = Store(db)
    with store.session() as s:
        kept = [(a.external_id, a.import_sha256) for a in s.scalars(select(Attempt).order_by(Attempt.id))]
    assert kept == [("a", "f1"), ("b", "f1"), (None, None), (None, None)]  # first copy of each run, own ones kept
    with pytest.raises(IntegrityError), store.session() as s:
        s.add(Attempt(source="imported", environment="triton_cumsum", agent="o1-preview", budget_s=1800.0,
                      import_sha256="f9", import_row=1, external_id="a"))
    summary = import_metr_runs(store, _write(tmp_path / "runs.jsonl", [_row(run_id="a"), _row(run_id="c")]))
    assert (summary.added, summary.already_present) == (1, 1)
    store.close()


def _table_counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as connection:
        tables = [name for (name,) in connection.execute("select name from sqlite_master where type = 'table'")]
        return {table: connection.execute(f'select count(*) from "{table}"').fetchone()[0] for table in tables}


def _bad_bytes(tmp: Path) -> Path:
    path = tmp / "latin1.jsonl"
    path.write_bytes(json.dumps(_row(run_id="x")).encode() + b'\n{"run_id": "caf\xe9"}\n')
    return path


def _folder(tmp: Path) -> Path:
    (tmp / "exports").mkdir()
    return tmp / "exports"


BAD_INPUTS: dict[str, tuple[object, list[str]]] = {
    # id: (how to make the file, what the one error line must name)
    "not-utf8": (_bad_bytes, ["latin1.jsonl", "line 2", "byte 0xe9 is not UTF-8"]),
    "directory": (_folder, ["exports is a directory"]),
    "missing": (lambda tmp: tmp / "absent.jsonl", ["absent.jsonl: no such file"]),
    "empty": (lambda tmp: _write(tmp / "empty.jsonl", []), ["empty.jsonl: the file has no rows", "--allow-empty"]),
    "no-re-bench-rows": (
        lambda tmp: _write(
            tmp / "hcast.jsonl", [_row(run_id=n, task_family="hcast_x", task_id="hcast_x/1") for n in "ab"]
        ),
        ["hcast.jsonl: none of its 2 rows is a RE-Bench run", "--allow-empty"],
    ),
    "unknown-family": (
        lambda tmp: _write(tmp / "runs.jsonl", [_row(run_id="x"), _row(run_id="y", task_family="ai_rd_bogus")]),
        ["line 2", "'ai_rd_bogus'", "allowed: ", "ai_rd_fix_embedding", "ai_rd_triton_cumsum"],
    ),
    "malformed-json": (
        lambda tmp: _write(tmp / "runs.jsonl", [_row(run_id="x"), _row(run_id="y"), '{"run_id": "z", score: 1}']),
        ["line 3: not valid JSON", '\'{"run_id": "z", score: 1}\''],
    ),
    "bad-score": (lambda tmp: _write(tmp / "runs.jsonl", [_row(run_id="x", score="high")]), ["'score'", "'high'"]),
    "negative-cost": (lambda tmp: _write(tmp / "runs.jsonl", [_row(run_id="x", dollar_equivalent=-5)]),
                      ["'dollar_equivalent'", "must be 0 or more dollars, got -5"]),
    "text-cost": (lambda tmp: _write(tmp / "runs.jsonl", [_row(run_id="x", dollar_equivalent="cheap")]),
                  ["'dollar_equivalent'", "'cheap'"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, case: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The real CLI entry point (in this process), on a database that already holds an import."""
    db = tmp_path / "r.db"
    store = Store(db)
    import_metr_runs(store, _write(tmp_path / "earlier.jsonl", [_row(run_id="earlier"), _row(run_id="e2", score=-0.5)]))
    store.close()
    before = _table_counts(db)
    make, expected = BAD_INPUTS[case]
    path = make(tmp_path)  # type: ignore[operator]
    code, out, err = run_main(["import", "metr-runs", str(path), "--db", str(db)], capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for text in expected:
        assert text in lines[0]
    assert out == ""
    assert _table_counts(db) == before
    assert before["attempts"] == 2


def test_allow_empty_and_clipped_scores_in_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    empty = _write(tmp_path / "hcast.jsonl", [_row(task_family="hcast_x", task_id="hcast_x/1")])
    code, out, err = run_main(["import", "metr-runs", str(empty), "--db", str(db), "--allow-empty", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["added"] == 0
    runs = _write(
        tmp_path / "runs.jsonl", [_row(run_id="a", score=-0.2), _row(run_id="b", score=0.3), _row(run_id="c", score=-1)]
    )
    code, out, err = run_main(["import", "metr-runs", str(runs), "--db", str(db)], capsys)
    assert code == 0, err
    assert "imported 3 RE-Bench runs" in out
    assert "2 negative scores clipped to 0" in out
    code, out, err = run_main(["import", "metr-runs", str(runs), "--db", str(db), "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["added"], summary["already_present"], summary["clipped_negative"]) == (0, 3, 0)
