"""Attacks on the scoring call from the agent's side (issue 10, classes 1 and 3, the result file
and /proc): each runs a real `replay` attempt in Docker through the CLI, on the fixture
environments `vault` (a held-out word in /protected; honest agents score 0) and `offload`
(solve.py's CPU time is charged; honest code scores 0.5). The attacker leaves a background
process, as a hostile agent would, and records what it achieved in its solution folder,
which the harness snapshots. Each case asserts no protected byte outside /protected, no score
above the honest one, and the attempt recorded as it happened."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.docker_support import base_image
from tests.test_docker_security import SECRET, attack, cli, docker_engine

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]

PAYLOADS = Path(__file__).parent / "payloads"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "docker_envs"


def payload(name: str) -> str:
    return (PAYLOADS / name).read_text()


@pytest.fixture(scope="module")
def envs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both fixture environments, built for the docker backend."""
    import shutil

    base_image(docker_engine())
    target = tmp_path_factory.mktemp("adversarial-envs")
    shutil.copytree(FIXTURES, target, dirs_exist_ok=True)
    for name in ("vault", "offload"):
        built = cli("envs", "build", name, "--profile", "tiny", "--backend", "docker",
                    env={"REBENCH_ENVIRONMENTS": str(target)})
        assert built.returncode == 0, built.stderr
    return target


def events(db: Path, attempt_id: int) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "select kind, raw, valid, message, details from score_events where attempt_id = ? order by id",
            (attempt_id,)).fetchall()
    return [{"kind": k, "raw": r, "valid": v, "message": json.loads(m or "{}"), "details": json.loads(d or "{}")}
            for k, r, v, m, d in rows]


def assert_nothing_protected_left(snapshot: Path, db: Path) -> None:
    for path in snapshot.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"{path} holds the held-out word"
    assert SECRET.encode() not in db.read_bytes()


def background(name: str, seconds: float = 40) -> list[dict[str, Any]]:
    """Actions that start a payload as a detached daemon (setsid, nohup), as an agent could."""
    return [
        {"write_file": {"path": "common.py", "content": payload("common.py")}},
        {"write_file": {"path": f"{name}.py", "content": payload(f"{name}.py")}},
        {"bash": f"setsid nohup python3 {name}.py {seconds} >/dev/null 2>&1 < /dev/null & sleep 0.5"},
    ]


def test_a_ptrace_takeover_of_the_scoring_helper_gains_nothing(envs_dir: Path, tmp_path: Path) -> None:
    row, snapshot = attack(envs_dir, tmp_path, [
        *background("hijack"), {"score": {}}, {"bash": "sleep 1"}, {"submit": None}])
    log = (snapshot / "attack.log").read_text()
    assert "waiting" in log  # the attacker ran
    assert "hijacked" not in log and "shell-ran" not in log, log
    assert not (snapshot / "leak.txt").exists()
    assert_nothing_protected_left(snapshot, tmp_path / "rebench.db")
    assert row["scores"] and max(row["scores"]) == 0.0  # what honest code earns on vault
    assert row["final_raw"] == 0.0


def test_a_racer_cannot_rewrite_the_result_file(envs_dir: Path, tmp_path: Path) -> None:
    row, snapshot = attack(envs_dir, tmp_path, [
        *background("race"), {"score": {}}, {"bash": "sleep 1"}, {"submit": None}])
    log = (snapshot / "attack.log").read_text()
    assert "waiting" in log  # the attacker ran
    assert "forged" not in log and "holding" not in log, log
    assert row["scores"] and max(row["scores"]) == 0.0
    assert_nothing_protected_left(snapshot, tmp_path / "rebench.db")


def test_the_scorers_processes_cannot_be_read_or_signalled_through_proc(envs_dir: Path, tmp_path: Path) -> None:
    row, snapshot = attack(envs_dir, tmp_path, [
        *background("procread", 8), {"score": {}}, {"bash": "sleep 9"}, {"submit": None}])
    log = (snapshot / "attack.log").read_text()
    assert "done," in log, log  # the reader ran to its end
    assert "READ" not in log and "SIGNAL" not in log, log
    assert not list((snapshot / "procdump").glob("*"))
    assert_nothing_protected_left(snapshot, tmp_path / "rebench.db")
    assert max(row["scores"]) == 0.0


def run_offload(envs_dir: Path, tmp_path: Path, actions: list[Any]) -> tuple[dict[str, Any], Path, list[Any]]:
    script = tmp_path / "script.yaml"
    import yaml

    script.write_text(yaml.safe_dump({"actions": actions}))
    db = tmp_path / "offload.db"
    result = cli("run", "--env", "offload", "--agent", "replay", "--agent-arg", f"script={script}",
                 "--profile", "tiny", "--budget", "3m", "--backend", "docker", "--db", str(db),
                 env={"REBENCH_ENVIRONMENTS": str(envs_dir)})
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        row = dict(connection.execute("select * from attempts order by id desc limit 1").fetchone())
    assert row["backend"] == "docker" and row["status"] == "done", row
    return row, Path(row["snapshot_path"]), events(db, row["id"])


def test_a_daemon_doing_the_work_earns_no_more_than_honest_code(envs_dir: Path, tmp_path: Path) -> None:
    row, _, scored = run_offload(envs_dir, tmp_path, [
        {"write_file": {"path": "solve.py", "content": (PAYLOADS / "honest_solve.py").read_text()}},
        {"score": {}},
        {"write_file": {"path": "daemon.py", "content": (PAYLOADS / "daemon.py").read_text()}},
        {"bash": "setsid nohup python3 daemon.py >/dev/null 2>&1 < /dev/null & sleep 1"},
        {"write_file": {"path": "solve.py", "content": (PAYLOADS / "offloaded_solve.py").read_text()}},
        {"score": {}},
        {"submit": None},
    ])
    intermediate = [e for e in scored if e["kind"] == "intermediate"]
    honest, offloaded = intermediate
    assert honest["raw"] == 0.5 and honest["message"]["correct"], honest
    assert offloaded["raw"] is not None and offloaded["raw"] <= honest["raw"], offloaded
    valid_raws = [e["raw"] for e in scored if e["raw"] is not None]
    assert max(valid_raws) <= honest["raw"], scored
    assert row["final_raw"] <= honest["raw"]


def test_an_honest_background_job_is_paused_during_scoring_and_keeps_its_state(
    envs_dir: Path, tmp_path: Path
) -> None:
    _, snapshot, scored = run_offload(envs_dir, tmp_path, [
        {"write_file": {"path": "counter.py", "content": (PAYLOADS / "counter.py").read_text()}},
        {"bash": "setsid nohup python3 counter.py >/dev/null 2>&1 < /dev/null & sleep 1; cp counter.txt before.txt"},
        {"write_file": {"path": "watch.txt", "content": "watch"}},
        {"score": {}},
        {"bash": "sleep 1; cp counter.txt after.txt"},
        {"submit": None},
    ])
    intermediate = [e for e in scored if e["kind"] == "intermediate"]
    assert intermediate and intermediate[0]["message"]["counter_moved"] is False, intermediate
    pid_before, count_before = (snapshot / "before.txt").read_text().split()
    pid_after, count_after = (snapshot / "after.txt").read_text().split()
    assert pid_after == pid_before  # the same process, not a restart
    assert int(count_after) > int(count_before) + 10  # it ran on after the score call
