"""Own human attempts in the report (a real SQLite store): as `human` beside METR's imported humans,
whatever their length, with working time as recorded and corrected, and their score log placed on
corrected working time."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from rebench.environments.registry import EnvironmentRegistry
from rebench.report.data import Filters
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.rows import ALL
from rebench.report.service import make_report, settings_from_options
from rebench.report.terminal import print_terminal
from rebench.store import Attempt, Store
from rebench.store.models import PauseCorrection
from tests.human_rows import WORKING_S, human_attempt

TOML = """
name = "toy"
title = "Toy Task"
version = "1"
summary = "test environment"
metr_task_family = "ai_rd_toy"

[profiles.tiny]
direction = "higher"
final_score = "best"
score_visible = true
anchors = { start = 0.0, reference = 10.0 }
"""


@pytest.fixture
def info(tmp_path: Path) -> EnvironmentInfo:
    (tmp_path / "environments" / "toy").mkdir(parents=True)
    (tmp_path / "environments" / "toy" / "environment.toml").write_text(TOML)
    return EnvironmentInfo(EnvironmentRegistry(tmp_path / "environments"))


def test_own_human_attempts_sit_beside_imported_ones_with_corrected_working_time(
    tmp_path: Path, info: EnvironmentInfo
) -> None:
    store = Store(tmp_path / "r.db")
    # a 2 h own human attempt scoring raw 8 at 4000 s of recorded working time (normalized 0.8) ...
    human_id = human_attempt(store, tmp_path / "gate", scores=((4000.0, 8.0),), final_raw=8.0)
    with store.session() as s:
        # ... with a 10 min unreported break before that score, added afterwards
        s.add(PauseCorrection(attempt_id=human_id, start_s=1800, end_s=2400, reason="unreported", author="ops"))
        s.add(Attempt(environment="toy", profile="tiny", agent="human", budget_s=28800, status="done",
                      source="imported", final_normalized=0.6, anchors_kind="imported"))
        s.add(Attempt(environment="toy", profile="tiny", agent="a", budget_s=7200, status="done", final_raw=5.0))
    report = make_report(store, Filters(), settings_from_options(n_bootstrap=50, budgets="1h,2h,8h"), info)
    assert report is not None

    def point(source: str, total_s: float) -> float:
        (row,) = [r for r in report.rows if (r.agent, r.source, r.environment, r.total_s) == ("human", source, ALL,
                                                                                               total_s)]
        return row.point

    assert point("own", 7200) == pytest.approx(0.8)  # the whole 2 h attempt, labelled human
    assert point("imported", 28800) == pytest.approx(0.6)  # next to METR's humans
    # cut to 1 h: the score came at 4000 s as recorded but 3400 s once the break is taken out
    assert point("own", 3600) == pytest.approx(0.8)
    (row,) = report.human_attempts
    assert (row.attempt_id, row.expert, row.corrections) == (human_id, "Ada Lovelace", 1)
    assert row.working_s == WORKING_S and row.corrected_working_s == WORKING_S - 600
    assert any("pause corrections" in note for note in report.notes)
    out = io.StringIO()
    print_terminal(report, Console(file=out, width=200), info=info)
    text = out.getvalue()
    assert "own human attempts: working time as recorded and corrected" in text
    assert "Ada Lovelace" in text and "1h40m (6000 s)" in text and "1h30m (5400 s)" in text
