"""`rebench doctor`: what this machine can run, through the real CLI (in this process: each call
takes about a second), against the real Docker engine here, and against none (DOCKER_HOST pointed
at a socket that does not exist). No GPU here: a profile that needs one is the missing thing."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from pathlib import Path

import pytest

from .conftest import run_main
from .docker_support import docker_engine

NO_ENGINE = "unix:///nonexistent-rebench-doctor.sock"


@pytest.fixture(autouse=True)
def _own_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REBENCH_DB", str(tmp_path / "results" / "rebench.db"))
    monkeypatch.delenv("REBENCH_FAKE_GPUS", raising=False)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_COMPATIBLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "results" / "rebench.db"


def _rows(document: dict) -> dict[str, dict]:
    return {f"{row['area']} {row['name']}": row for row in document["checks"]}


@pytest.mark.docker
def test_table_and_json_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    docker_engine()
    code, out, err = run_main(["doctor"], capsys)
    assert code == 0, err
    for shown in ("python", "docker", "engine", "cgroups", "landlock", "gpus", "ssh client", "ray", "keys", "database"):
        assert shown in out
    code, out, err = run_main(["doctor", "--backend", "docker", "--json"], capsys)
    document = json.loads(out)
    rows = _rows(document)
    assert code == 0, [row for row in document["checks"] if row["status"] == "missing"]
    assert document["ok"] is True and document["failing"] == [] and document["backend"] == "docker"
    assert rows["docker engine"]["status"] == "ok" and rows["docker engine"]["found"].startswith("Docker ")
    assert rows["docker cgroups"]["status"] == "ok" and "freezer" in rows["docker cgroups"]["found"]
    assert rows["database database"]["found"].endswith("the first run makes it (schema "
                                                       f"{rows['database database']['found'][-5:-1]})")
    assert document["generated_by"]["rebench_version"] in rows["rebench rebench"]["found"]


def test_no_engine_is_a_one_line_fix(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    code, out, _ = run_main(["doctor", "--backend", "docker"], capsys)
    assert code == 1
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert missing == ["missing: docker engine (needed by --backend docker): start a Docker engine "
                       "(e.g. `systemctl start docker`) or point DOCKER_HOST at one that runs; without one, use "
                       "--backend local"]
    code, out, _ = run_main(["doctor", "--backend", "docker", "--json"], capsys)
    document = json.loads(out)
    assert code == 1 and document["ok"] is False
    assert [(row["area"], row["name"]) for row in document["failing"]] == [("docker", "engine")]
    assert NO_ENGINE in document["failing"][0]["found"]
    # nobody named docker: the engine is reported, nothing fails, and a run would use the local backend
    code, out, _ = run_main(["doctor", "--json"], capsys)
    document = json.loads(out)
    assert code == 0 and document["backend"] == "local" and _rows(document)["docker engine"]["status"] == "missing"


def test_unknown_names_list_what_exists(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["doctor", "--env", "triton_cumsum,no_such_env"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "unknown environment 'no_such_env'; allowed: " in err and "triton_cumsum" in err
    code, out, err = run_main(["doctor", "--agent", "no_such_agent"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "unknown agent 'no_such_agent'; allowed: " in err and "modular" in err
    code, _, err = run_main(["doctor", "--backend", "kubernetes"], capsys)
    assert code == 2 and "unknown backend 'kubernetes'; allowed: docker, local" in err


def test_key_values_never_appear(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A set key is named; its value is in neither output. A key the named model needs is the missing thing."""
    secret = "sk-doctor-never-print-9f1c2e7a"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)  # not what this test is about: no engine keeps it fast
    for extra in ([], ["--json"]):
        code, out, err = run_main(["doctor", "--backend", "local", "--agent", "modular", "--model", "openai/gpt-4o",
                                   *extra], capsys)
        assert code == 0, out
        assert secret not in out + err and secret[3:15] not in out + err
        assert "set: OPENAI_API_KEY" in out
    code, out, err = run_main(["doctor", "--backend", "local", "--agent", "modular", "--model",
                               "anthropic/claude-sonnet-4-5"], capsys)
    assert code == 1 and secret not in out + err
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert len(missing) == 1 and missing[0].startswith("missing: agent modular (needed by --agent modular): ")
    assert "ANTHROPIC_API_KEY" in missing[0]


def test_what_a_named_environment_lacks(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here (none faked): the paper profile of a GPU environment cannot run, and says how to fix it."""
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    code, out, _ = run_main(["doctor", "--env", "activation_sparsity", "--profile", "paper", "--backend", "local"],
                            capsys)
    assert code == 1
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert len(missing) == 1
    assert missing[0].startswith("missing: env activation_sparsity (needed by --env activation_sparsity): "
                                 "activation_sparsity (paper) needs 1 GPU(s) but this machine has none")
    monkeypatch.setenv("REBENCH_FAKE_GPUS", "2")  # the inventory stand-in: then the local PyTorch is what lacks
    code, out, _ = run_main(["doctor", "--env", "activation_sparsity", "--profile", "paper", "--backend", "local"],
                            capsys)
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert code == 1 and len(missing) == 1 and "a CPU build" in missing[0]


def test_a_database_rebench_cannot_use(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    connection.close()
    code, out, _ = run_main(["doctor", "--db", str(foreign), "--json"], capsys)
    row = _rows(json.loads(out))["database database"]
    assert code == 0 and row["status"] == "missing" and "is not a rebench database" in row["fix"]
    code, out, _ = run_main(["doctor", "--db", str(foreign), "--backend", "local"], capsys)
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert code == 1 and len(missing) == 1
    assert missing[0].startswith("missing: database (needed by --backend local): ")
    assert foreign.read_bytes()[:16] == b"SQLite format 3\x00"  # looked at, not changed into a rebench database


FAKE_NVIDIA_SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"
  echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)"
  exit 0
fi
echo "+-----------------------------------------------------------------------------------------+"
echo "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |"
echo "|-----------------------------------------+------------------------+----------------------+"
"""


def test_gpus_as_nvidia_smi_lists_them(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: a stand-in `nvidia-smi` prints what the real one does on a two-GPU host (its `-L`
    listing and its header), and the report reads the count, driver and CUDA from it."""
    from rebench.environments.registry import EnvironmentRegistry

    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    code, out, _ = run_main(["doctor", "--json"], capsys)
    rows = _rows(json.loads(out))
    assert code == 0
    assert rows["gpus nvidia"] == {
        "area": "gpus", "name": "nvidia", "status": "ok", "found": "2 GPU(s), driver 550.54.15, CUDA 12.4",
        "fix": None, "needed_by": []}
    registry = EnvironmentRegistry()
    needs = [env.profile(p).resources.gpus for env in map(registry.get, registry.names())
             for p in env.metadata.profiles]
    beyond = sum(1 for count in needs if count > 2)
    assert f"{sum(1 for count in needs if count)} profiles need GPUs" in rows["gpus profiles"]["found"]
    assert (f"{beyond} of them need more than this machine has" if beyond else "all fit here") \
        in rows["gpus profiles"]["found"]


def test_a_ray_head_that_does_not_answer(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    with socket.socket() as probe:  # a port nothing listens on once this closes
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    code, out, _ = run_main(["doctor", "--ray-address", address], capsys)
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert code == 1 and len(missing) == 1
    assert missing[0].startswith(f"missing: ray (needed by --ray-address {address}): no Ray cluster answers at "
                                 f"--ray-address {address}")


def test_names_are_printed_as_literal_text(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A database path and a Ray address carrying Rich markup and escape sequences (a foreign database
    can be named by whoever wrote it) reach the table and the fix lines as the characters they are:
    no markup is read, no escape sequence reaches the terminal."""
    hostile = "[red]x[/red][link=http://e]y[/link]\x1b]8;;http://e\x07\x1b[31m"
    escaped = "[red]x[/red][link=http://e]y[/link]\\x1b]8;;http://e\\x07\\x1b[31m"
    name = "[bold]db[link=e]\x1b[31m"  # a file name holds no slash
    database = tmp_path / name
    database.write_text("not a database")
    code, out, _ = run_main(["doctor", "--db", str(database), "--ray-address", f"{hostile}:1"], capsys)
    assert code == 0  # neither is needed by a named backend, environment or agent
    assert "\x1b" not in out and "\x07" not in out
    (note,) = [line for line in out.splitlines() if line.startswith("note: database")]
    assert "[bold]db[link=e]\\x1b[31m is not a rebench database" in note, out
    flat = "".join(out.replace("│", "").split())  # the table's cells, unwrapped
    assert "".join(escaped.split()) in flat, out
