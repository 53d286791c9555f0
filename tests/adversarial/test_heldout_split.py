"""A held-out split is only held out while the agent cannot read it. Its params (and, in a real
environment, its data) are in the protected folder; here an agent tries to read them during the
attempt. On the local backend, which isolates nothing, the read succeeds (checked below, so the
test would notice a copy that is not there at all); on Docker the protected folder is root's, and
the read fails."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import yaml

from ..conftest import run_cli
from ..test_heldout import PROFILE

READ = "cat ../../protected/params-final.json /protected/params-final.json > leak.txt 2>&1; true"


def leaked(fixture_envs: Path, tmp_path: Path, db: Path, backend: str) -> str:
    toml = fixture_envs / "counter" / "environment.toml"
    if "[profiles.heldout]" not in toml.read_text():
        toml.write_text(toml.read_text() + PROFILE)
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    if backend == "docker":
        built = run_cli("envs", "build", "counter", "--profile", "heldout", "--backend", "docker", env=env)
        assert built.returncode == 0, built.stderr
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": READ}, {"write_file": {"path": "value.txt",
                                                                                   "content": "5"}},
                                                  {"score": {}}, {"submit": None}]}))
    ran = run_cli("run", "--env", "counter", "--profile", "heldout", "--agent", "replay", "--agent-arg",
                  f"script={script}", "--budget", "1m", "--backend", backend, "--db", str(db), "--no-calibrate",
                  env=env)
    assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db) as connection:
        (snapshot,), = connection.execute("select snapshot_path from attempts").fetchall()
        assert connection.execute("select raw from score_events where kind = 'heldout'").fetchall() == [(5.0,)]
    return (Path(snapshot) / "leak.txt").read_text()


@pytest.mark.adversarial
@pytest.mark.slow
def test_the_local_backend_lets_the_agent_read_the_heldout_params(fixture_envs: Path, tmp_path: Path,
                                                                   db_path: Path) -> None:
    assert '"split": "final"' in leaked(fixture_envs, tmp_path, db_path, "local")


@pytest.mark.adversarial
@pytest.mark.docker
@pytest.mark.slow
def test_on_docker_the_agent_cannot_read_the_heldout_params(fixture_envs: Path, tmp_path: Path,
                                                            db_path: Path) -> None:
    from ..docker_support import base_image, docker_engine

    base_image(docker_engine())
    text = leaked(fixture_envs, tmp_path, db_path, "docker")
    assert '"split": "final"' not in text and "Permission denied" in text, text
