"""rust_codecontests_inference on the Docker backend: the `ci` image (rustc installed from the
environment's system-packages.txt), one attempt of the reference agent through the gateway's
root forwarder, and the scorer's children confined inside the container (the `subject` user,
Landlock: /protected closed, no TCP), for the score calls and the held-out final alike. The one
Docker scoring run of this environment in CI."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from .conftest import run_cli
from .docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_reference_attempt_on_docker_scores_with_rustc_in_the_image_and_confined_programs(tmp_path: Path) -> None:
    base_image(docker_engine())
    db = tmp_path / "r.db"
    result = run_cli("run", "--env", "rust_codecontests_inference", "--agent", "reference", "--profile", "ci",
                     "--budget", "5m", "--backend", "docker", "--db", str(db), timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        status = connection.execute("select status from attempts").fetchone()[0]
        rows = connection.execute("select kind, raw, message, details from score_events order by id").fetchall()
        meters = {meter for (meter,) in connection.execute("select meter from gateway_requests where status = 200")}
    assert status == "done"
    kinds = [kind for kind, *_ in rows]
    assert kinds[:2] == ["baseline", "intermediate"] and kinds[-1] == "heldout"  # ci's final split, in the image too
    for _, raw, message, details in rows:
        message, details = json.loads(message), json.loads(details)
        assert raw is not None and message["n_problems"] == 10 and "error" not in message, message
        assert details["compiled"] > 0, details  # rustc is in the image
        assert details["solution_confined"] and details["programs_confined"], details
        assert "landlock tcp" in details["programs_network"], details
    assert meters == {"subject"}  # the solution's calls, on the score call's own token
