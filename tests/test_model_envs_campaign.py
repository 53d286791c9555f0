"""Issue 6's acceptance command: one `rebench run` over the three model environments with the
reference agent, once per backend, each named explicitly (`--backend local`, and a
Docker-marked twin with `--backend docker`), so that neither silently runs on the other."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.scoring.normalize import normalize

from .conftest import REPO, run_cli
from .docker_support import docker_engine

# alone: the references train within the attempt's wall-clock budget
pytestmark = [pytest.mark.slow, pytest.mark.torch, pytest.mark.alone]

ENVIRONMENTS = ["fix_embedding", "restricted_mlm", "small_scaling_law"]


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_reference_campaign_over_the_three_model_environments(tmp_path: Path, backend: str) -> None:
    if backend == "docker":
        docker_engine()  # a clean skip without an engine (a failure under REBENCH_CI_FULL=1)
    db = tmp_path / "rebench.db"
    # The three attempts at once: their scores are losses, not timings, so sharing the CPU does not
    # change them, and the campaign takes about half the time of one attempt after another.
    result = run_cli("run", "--env", ",".join(ENVIRONMENTS), "--agent", "reference", "--profile", "tiny",
                     "-k", "1", "--budget", "20m", "--backend", backend, "--parallel", "3", "--db", str(db),
                     timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "select a.environment, a.backend, a.status, a.error_source, a.final_normalized, s.raw from attempts a"
            " join score_events s on s.attempt_id = a.id and s.kind = 'baseline' order by a.environment"
        ).fetchall()
    assert [row[0] for row in rows] == ENVIRONMENTS, rows
    registry = EnvironmentRegistry(REPO / "environments")
    for environment, ran_on, status, error_source, normalized, baseline_raw in rows:
        assert ran_on == backend, (environment, ran_on)
        assert (status, error_source) == ("done", None), (environment, status, error_source, result.stderr[-2000:])
        # The starting solution, scored before the agent starts, sits near 0; the reference near 1.
        anchors = registry.get(environment).profile("tiny").anchors
        baseline = normalize(baseline_raw, anchors.start, anchors.reference, clip=False)
        assert -0.1 <= baseline <= 0.1, (environment, baseline_raw, baseline)
        assert normalized is not None, environment
        assert 0.8 <= normalized <= 1.25, (environment, normalized)
