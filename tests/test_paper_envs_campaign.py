"""Issue 30's acceptance command: one `rebench run` over the two environments taken from ICML 2025
papers (activation_sparsity, high_norm_tokens) with the reference agent, once per backend: the
reference lands at 0.8-1.25 normalized and the starting solution, scored before the agent starts,
near 0."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.scoring.normalize import normalize

from .conftest import REPO, run_cli
from .docker_support import docker_engine

pytestmark = [pytest.mark.slow, pytest.mark.torch]

ENVIRONMENTS = ["activation_sparsity", "high_norm_tokens"]


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_reference_campaign_over_the_two_paper_environments(tmp_path: Path, backend: str) -> None:
    if backend == "docker":
        docker_engine()  # a clean skip without an engine (a failure under REBENCH_CI_FULL=1)
    db = tmp_path / "rebench.db"
    result = run_cli("run", "--env", ",".join(ENVIRONMENTS), "--agent", "reference", "--profile", "tiny",
                     "-k", "1", "--budget", "20m", "--backend", backend, "--parallel", "2", "--db", str(db),
                     timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "select a.environment, a.backend, a.status, a.final_normalized, s.raw from attempts a"
            " join score_events s on s.attempt_id = a.id and s.kind = 'baseline' order by a.environment"
        ).fetchall()
    assert [row[0] for row in rows] == ENVIRONMENTS, rows
    registry = EnvironmentRegistry(REPO / "environments")
    for environment, ran_on, status, normalized, baseline_raw in rows:
        assert (ran_on, status) == (backend, "done"), (environment, ran_on, status, result.stderr[-2000:])
        anchors = registry.get(environment).profile("tiny").anchors
        baseline = normalize(baseline_raw, anchors.start, anchors.reference, clip=False)
        assert -0.1 <= baseline <= 0.1, (environment, baseline_raw, baseline)
        assert normalized is not None and 0.8 <= normalized <= 1.25, (environment, normalized)
