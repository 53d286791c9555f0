"""Bounded snapshots on the local backend, and the caps' configuration: the same capping
logic as the Docker case in tests/adversarial/test_snapshot_bounds.py, on a real folder with a
real FIFO, socket, links out and hard links (the local backend copies on the host, so these run
fast without Docker)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.sandbox.snapshot import SnapshotBudget

from .adversarial.test_snapshot_bounds import CAP_BYTES, CAP_FILES, assert_contained
from .conftest import run_cli
from .test_docker_security import FIXTURES, SECRET


def _local_sandbox(tmp_path: Path) -> LocalSandbox:
    sandbox = LocalSandbox(SandboxSpec(attempt_id=1, environment="t", profile="tiny"), tmp_path / "a",
                           sys.executable)
    asyncio.run(sandbox.start())
    return sandbox


def _flood(solution: Path, outside: Path) -> socket.socket:
    """The same flood as the Docker case, made on the host: the local backend's solution folder."""
    outside.write_text(SECRET)
    (solution / "a_big.bin").write_bytes(os.urandom(1 << 20) * 8)
    (solution / "b_code.py").write_text("print('kept')\n")
    many = solution / "z_many"
    many.mkdir()
    for i in range(3000):
        (many / f"f{i:04d}.txt").write_text("x" * 100)
    os.mkfifo(solution / "pipe")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(solution / "sock"))
    (solution / "to_outside").symlink_to(outside)
    (solution / "relative_escape").symlink_to("../../../../etc/passwd")
    (solution / "inner_link").symlink_to("b_code.py")
    (solution / "c_dot").symlink_to(".")
    (solution / "c_up").symlink_to("c_dot/..")  # inside by its name, outside once c_dot is followed
    os.link(outside, solution / "hard_outside")
    os.link(solution / "b_code.py", solution / "hard_inside.py")
    return server


def test_local_snapshot_is_capped_and_reports_what_it_left_out(tmp_path: Path) -> None:
    sandbox = _local_sandbox(tmp_path)
    solution = Path(sandbox.paths.solution)
    server = _flood(solution, tmp_path / "secret.txt")
    try:
        budget = SnapshotBudget(max_bytes=CAP_BYTES, max_files=CAP_FILES)
        report = asyncio.run(sandbox.copy_out(sandbox.paths.solution, str(tmp_path / "snap"), budget))
    finally:
        server.close()
    snapshot = tmp_path / "snap"
    assert_contained(snapshot, CAP_BYTES, CAP_FILES, SECRET.encode())
    reasons = {item.path: item.reason for item in report.left_out}
    # a_big.bin sorts first and passes the byte cap alone: it is left out and the copy goes on
    # until the entry cap, so the small files after it are kept.
    assert "a_big.bin" in reasons and "byte cap" in reasons["a_big.bin"]
    assert (snapshot / "b_code.py").read_text() == "print('kept')\n"
    assert (snapshot / "hard_inside.py").read_text() == "print('kept')\n"
    assert (snapshot / "inner_link").is_symlink() and (snapshot / "inner_link").read_text() == "print('kept')\n"
    assert "special" in reasons["pipe"] and "special" in reasons["sock"]
    assert "outside" in reasons["to_outside"] and "outside" in reasons["relative_escape"]
    assert "outside" in reasons["hard_outside"] and "outside" in reasons["c_up"]
    assert (snapshot / "c_dot").is_symlink() and not (snapshot / "c_up").is_symlink()
    assert report.capped and report.files == CAP_FILES
    # b_code.py, c_dot, c_up, hard_inside.py, inner_link and z_many/ leave 494 entries for f0000..f0493;
    # the copy stops at the next file and only counts the rest.
    assert report.stopped_at == "z_many/f0494.txt" and report.after_stop == 3000 - 495
    assert report.bytes == budget.used_bytes and report.files == budget.used_files
    note = report.note()
    assert note is not None and "left out" in note and "a_big.bin" in note and "stopped at z_many/f0494.txt" in note


def test_local_cap_counts_over_all_snapshots_of_an_attempt(tmp_path: Path) -> None:
    sandbox = _local_sandbox(tmp_path)
    solution = Path(sandbox.paths.solution)
    for i in range(6):
        (solution / f"part{i}.bin").write_bytes(b"y" * 1000)
    budget = SnapshotBudget(max_bytes=4500, max_files=100)
    first = asyncio.run(sandbox.copy_out(sandbox.paths.solution, str(tmp_path / "one"), budget))
    second = asyncio.run(sandbox.copy_out(sandbox.paths.solution, str(tmp_path / "two"), budget))
    assert (first.files, first.bytes) == (4, 4000)
    assert (second.files, second.bytes) == (0, 0) and second.capped
    assert {item.path for item in second.left_out} == {f"part{i}.bin" for i in range(6)}
    assert not list((tmp_path / "two").iterdir())


def _counter_with_cap(fixture_envs: Path) -> None:
    toml = fixture_envs / "counter" / "environment.toml"
    text = toml.read_text().replace(
        'params = { secret_file = "answer.txt" }\n\n[profiles.lower]',
        'params = { secret_file = "answer.txt" }\nsnapshot = { max_bytes = "5 MB", max_files = 500 }\n\n'
        "[profiles.lower]",
    )
    assert "snapshot" in text
    toml.write_text(text)


def test_local_attempt_records_what_the_snapshot_left_out(fixture_envs: Path, tmp_path: Path,
                                                          db_path: Path) -> None:
    _counter_with_cap(fixture_envs)
    flood = ("python3 -c \"import os; open('big.bin', 'wb').write(b'z' * 6_000_000); os.mkfifo('pipe')\"")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": flood}, {"submit": None}]}))
    result = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "tiny", "--budget", "1m", "--backend", "local", "--db", str(db_path),
                     env={"REBENCH_ENVIRONMENTS": str(fixture_envs)})
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(db_path) as connection:
        attempt_id, snapshot = connection.execute("select id, snapshot_path from attempts").fetchone()
        (data,) = connection.execute("select data from events where kind = 'snapshot'").fetchone()
    event: dict[str, Any] = json.loads(data)
    assert {item["path"] for item in event["left_out"]} >= {"big.bin", "pipe"}
    assert not (Path(snapshot) / "big.bin").exists() and (Path(snapshot) / "value.txt").is_file()
    note = event["note"]
    assert note and "big.bin" in note and "pipe" in note
    shown = run_cli("attempts", "show", str(attempt_id), "--db", str(db_path))
    assert shown.returncode == 0 and "snapshot" in shown.stdout and "big.bin" in shown.stdout
    shown_json = json.loads(run_cli("attempts", "show", str(attempt_id), "--json", "--db", str(db_path)).stdout)
    assert shown_json["snapshot_note"] == note


def test_caps_come_from_the_profile_and_bad_ones_are_one_line_errors(tmp_path: Path) -> None:
    from rebench.environments.metadata import load_metadata
    from rebench.environments.registry import default_environments_dir
    from rebench.errors import ConfigError

    gpt2_xl_fp32 = 6.2e9
    for toml in sorted(default_environments_dir().glob("*/environment.toml")):
        metadata = load_metadata(toml)
        assert metadata.profile("tiny").snapshot.max_bytes == 1 << 30, toml
        assert metadata.profile("tiny").snapshot.max_files == 100_000, toml
        if metadata.profile("paper").resources.gpus:  # an environment that trains models keeps checkpoints
            assert metadata.profile("paper").snapshot.max_bytes >= 2 * gpt2_xl_fp32, toml
    bad = tmp_path / "environment.toml"
    base = (FIXTURES / "vault" / "environment.toml").read_text()
    for value, shown in (('{ max_bytes = "lots" }', "'lots'"), ("{ max_files = 0 }", "max_files"),
                         ('{ max_bytes = "1 GiB", extra = 1 }', "unknown field")):
        bad.write_text(base + f"snapshot = {value}\n")
        with pytest.raises(ConfigError) as caught:
            load_metadata(bad)
        message = str(caught.value)
        assert "\n" not in message and "profiles.tiny.snapshot" in message and shown in message, message
