"""`rebench human start|stop|attach|status` refusing bad input: one line naming the value and what is
allowed, exit status 2, and no attempt or human_sessions row written (in-process CLI, real SQLite)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from .conftest import run_main

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm1mM8ZSmv2SW3R7d5yI8XkC1b1t3Vmn7Yw+u5m7ZGy expert@test"


def _counts(db: Path) -> tuple[int, int]:
    if not db.exists():
        return 0, 0
    with sqlite3.connect(db) as connection:
        tables = {name for (name,) in connection.execute("select name from sqlite_master where type='table'")}
        if "human_sessions" not in tables:
            return 0, 0
        return (connection.execute("select count(*) from attempts").fetchone()[0],
                connection.execute("select count(*) from human_sessions").fetchone()[0])


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519.pub"
    path.write_text(KEY + "\n")
    return path


@pytest.mark.parametrize(("change", "expected"), [
    ({"--env": "nope"}, "nope"),
    ({"--profile": "huge"}, "huge"),
    ({"--budget": "8 hours"}, "invalid duration '8 hours'"),
    ({"--budget": "0s"}, "longer than zero"),
    ({"--name": "  "}, "--name"),
    ({"--key": "MISSING"}, "cannot read --key"),
    ({"--key": "GARBAGE"}, "GARBAGE"),
    ({"--bind": "localhost:22"}, "invalid --bind 'localhost:22'"),
    ({"--port": "70000"}, "invalid --port 70000"),
    ({"--backend": "local"}, "need the docker backend, not 'local'"),
])
def test_start_refuses_bad_input(change: dict[str, str], expected: str, fixture_envs: Path, tmp_path: Path,
                                 key_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "human.db"
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("this is not a key\n")
    options = {"--env": "counter", "--profile": "tiny", "--budget": "8h", "--name": "Ada", "--key": str(key_file)}
    options.update(change)
    stand_ins = {"MISSING": str(tmp_path / "nokey.pub"), "GARBAGE": str(garbage)}
    options = {k: stand_ins.get(v, v) for k, v in options.items()}
    argv = ["human", "start", "--db", str(db)] + [part for item in options.items() for part in item]
    code, out, err = run_main(argv, capsys)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert expected.replace("GARBAGE", "") in lines[0] or (expected == "GARBAGE" and "key" in lines[0].lower())
    assert _counts(db) == (0, 0)


def test_commands_on_unknown_attempt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rebench.store.db import Store

    db = tmp_path / "human.db"
    Store(db).close()
    for command in ("status", "stop", "attach"):
        code, _, err = run_main(["human", command, "7", "--db", str(db)], capsys)
        assert code == 2 and "no human attempt 7" in err and len(err.strip().splitlines()) == 1


def test_local_backend_refuses_keep_alive(fixture_envs: Path) -> None:
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.errors import RebenchError
    from rebench.sandbox.base import SandboxSpec
    from rebench.sandbox.local import create_sandbox

    spec = SandboxSpec(attempt_id=1, environment="counter", profile="tiny", keep_alive=True)
    with pytest.raises(RebenchError, match="local backend cannot run human attempts"):
        create_sandbox(spec, EnvironmentRegistry().get("counter"))


def test_recover_orphans_leaves_human_attempts_alone(tmp_path: Path) -> None:
    """A human attempt whose supervisor died keeps `running` (its container holds the expert's work);
    an agent attempt of a dead harness is marked interrupted as before."""
    import subprocess
    import sys

    from rebench.campaign import recover_orphans
    from rebench.store.db import Store
    from rebench.store.models import Attempt, AttemptStatus, HumanSession

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store = Store(tmp_path / "orphans.db")
    with store.session() as session:
        rows = [Attempt(environment="counter", profile="tiny", agent=agent, budget_s=60.0,
                        status=AttemptStatus.RUNNING, pid=dead.pid) for agent in ("human", "reference")]
        session.add_all(rows)
        session.flush()
        session.add(HumanSession(attempt_id=rows[0].id, expert="Ada", public_key=KEY, supervisor_pid=dead.pid))
        ids = [row.id for row in rows]
    assert recover_orphans(store) == 1
    with store.session() as session:
        assert [session.get_one(Attempt, i).status for i in ids] == [AttemptStatus.RUNNING, AttemptStatus.INTERRUPTED]


def test_start_refuses_a_gpu_leased_to_a_live_attempt(fixture_envs: Path, tmp_path: Path, key_file: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A device held (lease row, live holder: this process) is named in one line; no human rows."""
    from rebench.scheduler.leases import LeaseBroker
    from rebench.store.db import Store
    from rebench.store.models import Attempt

    db = tmp_path / "human.db"
    store = Store(db)
    with store.session() as session:
        holder = Attempt(environment="counter", profile="tiny", agent="modular", budget_s=60.0, seed=0)
        session.add(holder)
        session.flush()
        holder_id = holder.id
    assert LeaseBroker(store).try_acquire(holder_id, [0, 1], 1) == [0]
    argv = ["human", "start", "--db", str(db), "--env", "counter", "--profile", "tiny", "--budget", "8h",
            "--name", "Ada", "--key", str(key_file), "--gpus", "1,0"]
    code, out, err = run_main(argv, capsys)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"GPU 0 is leased to attempt {holder_id}" in lines[0], err
    assert "GPU 1" not in lines[0], err
    assert _counts(db) == (1, 0)
    store.close()
