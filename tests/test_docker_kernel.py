"""The kernel environment on the docker backend scores its reference solution as the
local backend does (within timing noise), and leaves no container behind. On the `ci` profile:
tiny's task and scorer with two re-score rounds instead of seven."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rebench.sandbox.docker.engine import LABEL_OWNER, owner_alive

from .docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.torch]

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("REBENCH_ENVIRONMENTS", None)
    return subprocess.run(
        [sys.executable, "-m", "rebench.cli.app", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
        cwd=REPO,
    )


def normalized(db: Path, backend: str) -> list[float]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "select status, backend, final_normalized from attempts where backend = ? order by id", (backend,)
        ).fetchall()
    assert all(status == "done" for status, _, _ in rows), rows
    return [value for _, _, value in rows]


def test_reference_agent_scores_the_same_on_docker_and_local(calibrated_kernel_ci_db: Path) -> None:
    engine = docker_engine()
    base_image(engine)
    for backend in ("docker", "local"):
        built = cli("envs", "build", "triton_cumsum", "--profile", "ci", "--backend", backend)
        assert built.returncode == 0, built.stderr
    scores = {}
    # One database, holding this session's calibration (same machine): its anchors serve both
    # backends, so the two normalized scores are on the same scale.
    db = calibrated_kernel_ci_db
    for backend in ("docker", "local"):
        result = cli(
            "run",
            "--env",
            "triton_cumsum",
            "--agent",
            "reference",
            "--agent-arg",
            "repeats=1",  # one score call per attempt: the check compares backends, not the best of several
            "--profile",
            "ci",
            "--backend",
            backend,
            "--budget",
            "10m",
            "-k",
            "1",
            "--db",
            str(db),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        scores[backend] = normalized(db, backend)
    (docker_score,), (local_score,) = scores["docker"], scores["local"]
    assert docker_score > 0.5, scores
    assert local_score > 0.5, scores
    assert abs(docker_score - local_score) < 0.5, scores  # timing noise on a shared 2-core machine
    with sqlite3.connect(db) as connection:  # neither run measured the anchors again
        assert connection.execute("select count(*) from calibrations").fetchone() == (1,)
    # Both runs have exited, so a container of theirs has a dead owner; a live owner is another
    # checkout's test run on the same engine, which is not this test's leak.
    leaked = [c for c in engine.containers() if c[3].get("rebench.environment") == "triton_cumsum"
              and not owner_alive(c[3].get(LABEL_OWNER, ""))]
    assert not leaked
