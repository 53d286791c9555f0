"""Importing METR's run-level export into a real SQLite store."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import func, select

from rebench.errors import RebenchError
from rebench.report.importer import import_metr_runs
from rebench.store import Attempt, Store

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


def test_environment_folder_names_the_family(tmp_path: Path) -> None:
    """A folder whose metadata claims a METR family wins over the built-in table and the prefix rule."""
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.report.known_environments import EnvironmentInfo

    folder = tmp_path / "envs" / "kernel"
    folder.mkdir(parents=True)
    (folder / "environment.toml").write_text(
        'name = "kernel"\ntitle = "K"\nversion = "1"\nsummary = "s"\n'
        'metr_task_family = "ai_rd_triton_cumsum"\n'
        '[profiles.tiny]\ndirection = "lower"\nfinal_score = "best"\n'
        "anchors = { start = 2.0, reference = 1.0 }\n"
    )
    info = EnvironmentInfo(EnvironmentRegistry(tmp_path / "envs"))
    path = _write(
        tmp_path / "runs.jsonl",
        [_row(), _row(task_family="ai_rd_fix_embedding"), _row(task_family="ai_rd_new_thing")],
    )
    store = Store(tmp_path / "r.db")
    import_metr_runs(store, path, info)
    with store.session() as s:
        names = list(s.scalars(select(Attempt.environment).order_by(Attempt.import_row)))
    assert names == ["kernel", "fix_embedding", "new_thing"]
