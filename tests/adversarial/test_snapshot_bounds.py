"""Bounded snapshots: an agent fills its solution folder with a file larger than the cap,
thousands of small files, a FIFO, a socket, links out of the folder and hard links, and the
harness must copy no more than the profile's cap to the host, never a special file, nothing
from outside the solution folder, and say in the attempt what it left out.

The Docker cases run a real `replay` attempt through the CLI on a copy of the `vault` fixture
whose tiny profile caps snapshots at 5 MB and 500 entries, and a 200 MB file straight through
the sandbox's copy; tests/test_snapshot_bounds_local.py drives the same capping logic through
the local backend."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.sandbox.snapshot import SnapshotBudget

from ..conftest import run_cli
from ..test_docker_security import FIXTURES, SECRET, cli

CAP_BYTES = 5_000_000
CAP_FILES = 500
CAP_TOML = f'snapshot = {{ max_bytes = "5 MB", max_files = {CAP_FILES} }}\n'

# Names sort so that the special files and links come before the 3,000 small files (which hit
# the entry cap) and the large file comes last: Docker's archive lists entries in name order.
FLOOD = r"""
set -u
cd /home/agent/solution
python3 - <<'EOF'
import os, socket
os.mkfifo("a_pipe")
s = socket.socket(socket.AF_UNIX)
s.bind("a_sock")
os.symlink("/protected", "a_to_protected")
os.symlink("/protected/secret.txt", "a_to_secret")
os.symlink("../../../etc/passwd", "a_relative_escape")
with open("kept.txt", "w") as f:
    f.write("kept\n")
os.link("kept.txt", "kept_hardlink.txt")
for source in ("/protected/secret.txt", "/etc/passwd"):
    try:
        os.link(source, "hard_" + os.path.basename(source))
    except OSError as exc:
        print("link refused:", source, exc)
os.makedirs("m_many", exist_ok=True)
for i in range(3000):
    with open(f"m_many/f{i:04d}.txt", "w") as f:
        f.write("x" * 100)
with open("zz_big.bin", "wb") as f:
    f.write(os.urandom(1 << 20) * 8)
EOF
"""


def _tree(root: Path) -> tuple[int, int, list[Path]]:
    """Entries, bytes of regular files, and every path under `root` (links not followed)."""
    paths = list(root.rglob("*"))
    size = sum(p.lstat().st_size for p in paths if p.is_file() and not p.is_symlink())
    return len(paths), size, paths


def assert_contained(snapshot: Path, cap_bytes: int, cap_files: int, secret: bytes) -> None:
    entries, size, paths = _tree(snapshot)
    assert entries <= cap_files and size <= cap_bytes, (entries, size)
    root = snapshot.resolve()
    for path in paths:
        mode = path.lstat().st_mode
        assert stat.S_IFMT(mode) in {stat.S_IFLNK, stat.S_IFDIR, stat.S_IFREG}, f"special file on the host: {path}"
        if path.is_symlink():
            assert path.resolve().is_relative_to(root), f"{path} leads out of the snapshot"
        elif path.is_file():
            assert secret not in path.read_bytes(), f"{path} holds protected data"
        assert not mode & 0o6000, f"{path} kept a setuid/setgid bit"


@pytest.mark.adversarial
@pytest.mark.docker
@pytest.mark.slow
def test_docker_snapshot_stays_within_the_cap(tmp_path: Path) -> None:
    from ..docker_support import base_image, docker_engine

    base_image(docker_engine())
    envs = tmp_path / "envs"
    vault = envs / "vault"
    shutil.copytree(FIXTURES / "vault", vault)
    with (vault / "environment.toml").open("a") as handle:
        handle.write(CAP_TOML)
    env = {"REBENCH_ENVIRONMENTS": str(envs)}
    built = cli("envs", "build", "vault", "--profile", "tiny", "--backend", "docker", env=env)
    assert built.returncode == 0, built.stderr
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": FLOOD}, {"submit": None}]}))
    db = tmp_path / "rebench.db"
    result = cli("run", "--env", "vault", "--agent", "replay", "--agent-arg", f"script={script}",
                 "--profile", "tiny", "--budget", "3m", "--backend", "docker", "--db", str(db), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db) as connection:
        attempt_id, status, snapshot_path = connection.execute(
            "select id, status, snapshot_path from attempts").fetchone()
        events = [json.loads(data) for (data,) in connection.execute(
            "select data from events where kind = 'snapshot' and attempt_id = ?", (attempt_id,))]
    assert status == "done"
    snapshot = Path(snapshot_path)
    assert_contained(snapshot, CAP_BYTES, CAP_FILES, SECRET.encode())
    for name in ("kept.txt", "kept_hardlink.txt"):  # plain files on the host, whatever they were inside
        assert stat.S_ISREG((snapshot / name).lstat().st_mode), name
        assert (snapshot / name).read_text() == "kept\n", name
    assert not (snapshot / "zz_big.bin").exists()
    # What was left out is recorded: the cap that was hit, the special file, the links out.
    assert len(events) == 1
    event = events[0]
    assert event["cap_bytes"] == CAP_BYTES and event["cap_files"] == CAP_FILES
    assert event["files"] == CAP_FILES and event["capped"]
    assert event["stopped_at"] and event["stopped_at"].startswith("m_many/") and event["after_stop"] is None
    reasons = {item["path"]: item["reason"] for item in event["left_out"]}
    assert "special" in reasons["a_pipe"]
    for name in ("a_to_protected", "a_to_secret", "a_relative_escape"):
        assert "outside" in reasons[name]
        assert not (snapshot / name).exists() and not (snapshot / name).is_symlink()
    note = event["note"]
    assert note and "left out" in note and "capped" in note and "stopped at m_many/" in note
    shown = run_cli("attempts", "show", str(attempt_id), "--db", str(db))
    assert shown.returncode == 0 and "left out" in shown.stdout


@pytest.mark.adversarial
@pytest.mark.docker
@pytest.mark.slow
def test_docker_snapshot_stream_is_cut_at_the_cap(tmp_path: Path) -> None:
    """A 200 MB file in the folder: the copy reads about the cap from the container's archive
    stream, not the whole file, and keeps what came before it."""
    from ..docker_support import base_image, docker_engine, with_sandbox

    image = base_image(docker_engine())

    async def body(sandbox: Any) -> Any:
        made = await sandbox.exec(f"mkdir -p {sandbox.paths.solution} && cd {sandbox.paths.solution} && "
                                  "echo small > a_small.txt && head -c 200000000 /dev/zero > b_huge.bin",
                                  cwd="/", timeout=120)
        assert made.ok, made.stderr
        budget = SnapshotBudget(max_bytes=CAP_BYTES, max_files=CAP_FILES)
        return await sandbox.copy_out(sandbox.paths.solution, str(tmp_path / "snap"), budget)

    report = with_sandbox(image, body)
    assert (tmp_path / "snap" / "a_small.txt").read_text() == "small\n"
    assert not (tmp_path / "snap" / "b_huge.bin").exists()
    assert report.capped and {item.path for item in report.left_out} == {"b_huge.bin"}
    assert report.read_bytes <= CAP_BYTES + 1024 * (CAP_FILES + 4) + (4 << 20), report.read_bytes
