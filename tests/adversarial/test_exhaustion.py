"""Exhaustion (issue 50): an agent fills the disk and the inodes of every folder it can write,
forks tens of thousands of processes, opens files until EMFILE. Each attempt's damage must stay
its own: the host keeps its disk and inode table, a second attempt's commands answer meanwhile,
the scorer still scores, and the attempt ends with an honest row and no container left.

Before the agent's disk (rebench/sandbox/docker/disk.py) the agent's home and /tmp were the
container's overlay layer on the host's disk, watched by a 5 s poll of its size: `fallocate`
took gigabytes past the limit at once, and empty files counted as nothing at all. Real Docker
engine, base image and (for the whole attempt) the `vault` fixture through the CLI; the disk
limit is set small (REBENCH_DISK_LIMIT_GB) so that it fills in seconds."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.errors import LimitExceeded

from ..docker_support import base_image, docker_engine, run, started_sandbox
from ..test_docker_security import cli, envs_dir  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.adversarial, pytest.mark.docker]

LIMIT_GB = 0.25
LIMIT = int(LIMIT_GB * 1024**3)
WRITABLE = ("/home/agent", "/home/agent/solution", "/tmp", "/var/tmp", "/dev/shm", "/run/lock")
FILL = " ; ".join(
    f"mkdir -p {folder}/fill 2>/dev/null; for i in $(seq 3); do fallocate -l 1G {folder}/fill/f$i 2>/dev/null"
    f" || dd if=/dev/zero of={folder}/fill/d$i bs=1M count=1024 status=none 2>/dev/null || break; done"
    for folder in WRITABLE
)
"""Up to 3 GiB into each folder the agent might write, by fallocate (instant) or dd."""
COUNT_FILLED = "du -scB1 " + " ".join(f"{folder}/fill" for folder in WRITABLE) + " 2>/dev/null | tail -1"
MANY_FILES = r"""
import os, sys
made = 0
for folder in ("/home/agent", "/tmp"):
    for i in range(40_000):
        try:
            os.makedirs(f"{folder}/many", exist_ok=True)
            open(f"{folder}/many/{i}", "x").close()
        except OSError as exc:
            print(folder, exc.strerror, file=sys.stderr)
            break
        made += 1
print(made)
"""
SCORER_SCRATCH = ("import os, tempfile; d = tempfile.mkdtemp(); p = os.path.join(d, 'x'); "
                  "open(p, 'wb').write(b'x' * 1000000); print(d, os.path.getsize(p))")
OPEN_FILES = r"""
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
reads = []
for _ in range(int(sys.argv[1])):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        n = 0
        try:
            while True:
                os.open("/dev/null", os.O_RDONLY)
                n += 1
        except OSError:
            pass
        os.write(w, f"{n}\n".encode())
        time.sleep(600)
    os.close(w)
    reads.append(r)
print(hard, sum(int(os.read(r, 32)) for r in reads), flush=True)
"""


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


@pytest.fixture
def small_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBENCH_DISK_LIMIT_GB", str(LIMIT_GB))


async def _refused_after_the_watch(sb: Any) -> str:
    """The disk watch (every 5 s) sees the full disk: the agent's next command is refused."""
    for _ in range(60):
        if sb.breach:
            break
        await asyncio.sleep(0.25)
    with pytest.raises(LimitExceeded):
        await sb.exec("echo more > /home/agent/x", timeout=30)
    return str(sb.breach)


async def _beside(image: str, attack_body: Any) -> tuple[Any, list[float]]:
    """Run `attack_body(sandbox)` in one attempt while a second attempt's agent runs `true` every
    0.2 s; the second's round trips (each must answer) come back with the attack's result."""
    async with started_sandbox(image) as hostile, started_sandbox(image) as other:
        trips: list[float] = []
        done = asyncio.Event()

        async def keep_calling() -> None:
            while not done.is_set():
                began = asyncio.get_running_loop().time()
                answered = await other.exec("true", timeout=60)
                assert answered.ok, answered.stderr
                trips.append(asyncio.get_running_loop().time() - began)
                await asyncio.sleep(0.2)

        caller = asyncio.create_task(keep_calling())
        try:
            result = await attack_body(hostile)
        finally:
            done.set()
            await caller
        return result, trips


def test_filling_every_writable_folder_stops_at_the_attempts_disk(image: str, small_disk: None) -> None:
    before = shutil.disk_usage("/var/lib/docker" if Path("/var/lib/docker").is_dir() else "/").free

    async def body(sb: Any) -> tuple[int, int, Any, str]:
        await sb.exec(FILL, timeout=120)
        filled = int((await sb.exec(COUNT_FILLED, timeout=60)).stdout.split()[0])
        host_free = shutil.disk_usage("/var/lib/docker" if Path("/var/lib/docker").is_dir() else "/").free
        breach = await _refused_after_the_watch(sb)
        scored = await sb.exec(["python3", "-c", SCORER_SCRATCH], user="scorer", timeout=60)
        return filled, host_free, scored, breach

    (filled, host_free, scored, breach), trips = run(_beside(image, body))
    shm = max(0.5, 1.0 / 2) * 1024**3  # /dev/shm: a tmpfs inside the memory limit
    assert filled <= LIMIT + shm + (16 << 20), f"the agent wrote {filled / 1024**3:.2f} GiB past its {LIMIT_GB} GB"
    assert before - host_free < LIMIT + (1 << 30), "the host's disk lost more than the attempt's limit"
    assert trips and max(trips) < 10, trips  # the other attempt kept answering
    assert scored.ok and scored.stdout.split()[1] == "1000000", scored.stdout + scored.stderr
    assert "disk limit" in breach, breach


def test_many_empty_files_stop_at_the_attempts_inode_count(image: str, small_disk: None) -> None:
    async def body(sb: Any) -> tuple[Any, Any, Any, str]:
        await sb.write_file("many.py", MANY_FILES.encode())
        made = await sb.exec("python3 many.py", timeout=120)
        inodes = await sb.exec("df --output=itotal /home/agent | tail -1", timeout=60)
        breach = await _refused_after_the_watch(sb)
        scored = await sb.exec(["python3", "-c", SCORER_SCRATCH], user="scorer", timeout=60)
        return made, scored, inodes, breach

    (made, scored, inodes, breach), trips = run(_beside(image, body))
    assert made.stdout.strip(), made.stderr
    assert int(made.stdout) < 80_000, "the agent made every file it asked for: no inode bound"
    assert int(made.stdout) <= int(inodes.stdout), (made.stdout, inodes.stdout)
    assert "No space left" in made.stderr
    assert trips and max(trips) < 10, trips
    assert scored.ok, scored.stdout + scored.stderr  # the scorer's scratch is not the agent's disk
    assert "files of its disk" in breach, breach


def test_a_fork_bomb_stays_in_its_attempt(image: str) -> None:
    """Already held (docs/security.md, fork bombs): here with a second attempt beside it."""
    bomb = "b() { b | b & }; b"

    async def body(sb: Any) -> tuple[Any, int, Any]:
        await sb.exec(f"( setsid bash -c '{bomb}' >/dev/null 2>&1 < /dev/null & ) ; sleep 0.2", timeout=20)
        await asyncio.sleep(4)
        scored = await sb.exec(["python3", "-c", "print('scored')"], user="scorer", timeout=60)
        killed = await sb.kill_agent_processes()
        return scored, killed, await sb.exec("echo alive", timeout=60)

    (scored, killed, again), trips = run(_beside(image, body))
    assert scored.ok and scored.stdout.strip() == "scored"
    assert killed > 100
    assert again.stdout.strip() == "alive"
    assert trips and max(trips) < 10, trips


def test_open_files_stay_in_the_container(image: str) -> None:
    """Already held: RLIMIT_NOFILE is per process, so the host's harness keeps its descriptors
    whatever the agent opens (20 processes at their hard limit here); the gateway's forwarder
    (64 connections per user) and the task socket (32 clients) bound what reaches the host."""
    harness_fds = len(os.listdir("/proc/self/fd"))

    async def body(sb: Any) -> tuple[Any, Any, int]:
        await sb.write_file("files.py", OPEN_FILES.encode())
        opened = await sb.exec("timeout 60 python3 files.py 20 & sleep 1; wait", timeout=90)
        scored = await sb.exec(["python3", "-c", "import tempfile; tempfile.TemporaryFile(); print('ok')"],
                               user="scorer", timeout=60)
        during = len(os.listdir("/proc/self/fd"))
        await sb.kill_agent_processes()
        return opened, scored, during

    (opened, scored, during), trips = run(_beside(image, body))
    hard, total = (int(x) for x in opened.stdout.split())
    assert total >= 20 * (hard - 100), opened.stdout  # the attack ran: each child hit its own limit
    assert scored.ok and scored.stdout.strip() == "ok"
    assert during - harness_fds < 50, (harness_fds, during)
    assert trips and max(trips) < 10, trips


@pytest.mark.slow
def test_a_full_disk_attempt_ends_honestly(envs_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    """The whole attempt through the CLI: the agent fills its disk and its inodes, then tries to
    go on. The row says `limit`, reason `disk`, with the starting score a valid 0 (vault: it never
    found the word); the container is gone and so is its disk."""
    disk_dir = tmp_path / "disks"  # this run's own: other tests' attempts make disks beside it meanwhile
    disk_dir.mkdir()
    fill = FILL + " ; python3 - <<'EOF'\n" + MANY_FILES + "EOF\n"
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": fill}, {"sleep": 7}, {"bash": "echo on > after.txt"},
                                                  {"submit": None}]}))
    db = tmp_path / "full.db"
    result = cli("run", "--env", "vault", "--agent", "replay", "--agent-arg", f"script={script}", "--profile",
                 "tiny", "--budget", "3m", "--backend", "docker", "--db", str(db),
                 env={"REBENCH_ENVIRONMENTS": str(envs_dir), "REBENCH_DISK_LIMIT_GB": str(LIMIT_GB),
                      "REBENCH_DISK_DIR": str(disk_dir)})
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db) as connection:
        attempt, status, reason, snapshot = connection.execute(
            "select id, status, limit_reason, snapshot_path from attempts").fetchone()
        scores = [raw for (raw,) in connection.execute("select raw from score_events where attempt_id = ?",
                                                        (attempt,))]
    assert (status, reason) == ("limit", "disk")
    assert scores and all(raw == 0.0 for raw in scores), scores
    assert not (Path(snapshot) / "after.txt").exists()
    engine = docker_engine()
    assert not [c for c in engine.containers() if c[3].get("rebench.attempt") == str(attempt)
                and c[3].get("rebench.environment") == "vault"]
    assert list(disk_dir.iterdir()) == [], "the attempt's disk was left on the host"
