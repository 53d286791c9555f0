"""Issue 6's acceptance command, verbatim: one `rebench run` over the three model
environments with the reference agent. It uses the default backend (Docker when an
engine answers, as in CI; otherwise local with a warning), so it is the run a user gets."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.scoring.normalize import normalize

from .conftest import REPO, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.torch]

ENVIRONMENTS = ["fix_embedding", "restricted_mlm", "small_scaling_law"]


def test_reference_campaign_over_the_three_model_environments(tmp_path: Path) -> None:
    db = tmp_path / "rebench.db"
    result = run_cli("run", "--env", ",".join(ENVIRONMENTS), "--agent", "reference", "--profile", "tiny",
                     "-k", "1", "--budget", "20m", "--db", str(db), timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "select a.environment, a.status, a.error_source, a.final_normalized, s.raw from attempts a"
            " join score_events s on s.attempt_id = a.id and s.kind = 'baseline' order by a.environment"
        ).fetchall()
    assert [row[0] for row in rows] == ENVIRONMENTS, rows
    registry = EnvironmentRegistry(REPO / "environments")
    for environment, status, error_source, normalized, baseline_raw in rows:
        assert (status, error_source) == ("done", None), (environment, status, error_source, result.stderr[-2000:])
        # The starting solution, scored before the agent starts, sits near 0; the reference near 1.
        anchors = registry.get(environment).profile("tiny").anchors
        baseline = normalize(baseline_raw, anchors.start, anchors.reference, clip=False)
        assert -0.1 <= baseline <= 0.1, (environment, baseline_raw, baseline)
        assert normalized is not None and 0.8 <= normalized <= 1.25, (environment, normalized)
