"""Security of the docker backend: each test runs a `replay` attempt in Docker through
the real CLI, as an adversarial agent would act, on the dependency-free `vault`
fixture environment (held-out word in /protected; score 1 if the agent finds it).
The agent records what it saw in files of its solution, which the harness snapshots."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from .docker_support import base_image, docker_engine, started_sandbox

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "docker_envs"
SECRET = "held-out-word-5b1e9c"


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rebench.cli.app", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=timeout,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def envs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the fixture environments with the vault image built for the docker backend."""
    base_image(docker_engine())
    target = tmp_path_factory.mktemp("docker-envs")
    shutil.copytree(FIXTURES, target, dirs_exist_ok=True)
    built = cli(
        "envs",
        "build",
        "vault",
        "--profile",
        "tiny",
        "--backend",
        "docker",
        env={"REBENCH_ENVIRONMENTS": str(target)},
    )
    assert built.returncode == 0, built.stderr
    return target


def attack(
    envs_dir: Path,
    tmp_path: Path,
    actions: list[Any],
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Path]:
    """Run one replay attempt; return its attempt row and its solution snapshot."""
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    db = tmp_path / "rebench.db"
    result = cli(
        "run",
        "--env",
        "vault",
        "--agent",
        "replay",
        "--agent-arg",
        f"script={script}",
        "--profile",
        "tiny",
        "--budget",
        "3m",
        "--backend",
        "docker",
        "--db",
        str(db),
        env={"REBENCH_ENVIRONMENTS": str(envs_dir), **(env or {})},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        row = dict(connection.execute("select * from attempts order by id desc limit 1").fetchone())
        row["scores"] = [
            r[0]
            for r in connection.execute(
                "select raw from score_events where attempt_id = ? order by id", (row["id"],)
            )
        ]
    assert row["backend"] == "docker" and row["status"] == "done", row
    engine = docker_engine()

    def left() -> list[Any]:
        return [c for c in engine.containers() if c[3].get("rebench.attempt") == str(row["id"])
                and c[3].get("rebench.environment") == "vault"]

    # A container the engine is still removing (AutoRemove is asynchronous) gets a few seconds.
    deadline = time.monotonic() + 15
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left()
    return row, Path(row["snapshot_path"])


def test_agent_cannot_read_protected(envs_dir: Path, tmp_path: Path) -> None:
    probe = (
        "{ cat /protected/secret.txt; ls -la /protected; cat /protected/params.json;"
        "  cat /opt/rebench/env/protected/secret.txt; ls /opt/rebench/env;"
        f"  grep -rs {SECRET} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev;"
        " } > probe.txt 2>&1; true"
    )
    row, snapshot = attack(envs_dir, tmp_path, [{"bash": probe}, {"score": {}}, {"submit": None}])
    seen = (snapshot / "probe.txt").read_text()
    assert SECRET not in seen
    assert seen.count("Permission denied") >= 4
    assert row["scores"] and all(score == 0.0 for score in row["scores"])  # the scorer could read it
    assert row["final_raw"] == 0.0


def test_agent_cannot_change_scoring_or_the_helper(envs_dir: Path, tmp_path: Path) -> None:
    fake = 'def score(ctx):\\n    return {\\"raw\\": 1.0}\\n'
    probe = (
        "{ cd /home/agent; printf '"
        + fake
        + "' > score.py; mv score.py old.py && printf '"
        + fake
        + "' > score.py;"
        "  echo 'raise SystemExit' >> /opt/rebench/score_helper.py; rm -f /opt/rebench/score_helper.py;"
        "  ls /protected/scoring; } > /home/agent/solution/probe.txt 2>&1; true"
    )
    row, snapshot = attack(envs_dir, tmp_path, [{"bash": probe}, {"score": {}}, {"submit": None}])
    seen = (snapshot / "probe.txt").read_text()
    assert "Permission denied" in seen
    assert len(row["scores"]) >= 2 and all(score == 0.0 for score in row["scores"])
    assert row["final_raw"] == 0.0


def test_no_provider_key_reaches_the_agent(envs_dir: Path, tmp_path: Path) -> None:
    canary = "sk-canary-" + os.urandom(6).hex()
    probe = (
        "{ env; cat /proc/1/environ; grep -rs " + canary[:14] + " / --exclude-dir=proc --exclude-dir=sys"
        " --exclude-dir=dev; } > probe.txt 2>&1; true"
    )
    _, snapshot = attack(
        envs_dir,
        tmp_path,
        [{"bash": probe}, {"submit": None}],
        env={"OPENAI_API_KEY": canary, "ANTHROPIC_API_KEY": canary, "REBENCH_TEST_KEY": canary},
    )
    seen = (snapshot / "probe.txt").read_text()
    assert "PATH=" in seen  # the probe ran
    assert canary not in seen and "OPENAI_API_KEY" not in seen


NETWORK_PROBE = """import socket
print(sorted(name for _, name in socket.if_nameindex()))
try:
    socket.create_connection(("pypi.org", 443), timeout=5)
    print("REACHED")
except OSError as exc:
    print("unreachable", type(exc).__name__)
"""


def test_no_network_when_the_environment_denies_it(envs_dir: Path, tmp_path: Path) -> None:
    actions = [
        {"write_file": {"path": "probe.py", "content": NETWORK_PROBE}},
        {"bash": "python3 probe.py > probe.txt 2>&1; true"},
        {"submit": None},
    ]
    _, snapshot = attack(envs_dir, tmp_path, actions)
    seen = (snapshot / "probe.txt").read_text()
    assert "['lo']" in seen and "unreachable" in seen and "REACHED" not in seen


def _host_processes(needle: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == needle:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_no_agent_process_outlives_its_attempt(envs_dir: Path, tmp_path: Path) -> None:
    tag = str(1000 + int.from_bytes(os.urandom(2), "big"))
    probe = (f"nohup sleep {tag} >/dev/null 2>&1 & setsid sleep {tag} >/dev/null 2>&1 &"
             " sleep 0.3; pgrep -c sleep > probe.txt")
    _, snapshot = attack(envs_dir, tmp_path, [{"bash": probe}, {"submit": None}])
    assert (snapshot / "probe.txt").read_text().strip() == "2"
    assert _host_processes(f"sleep\0{tag}\0".encode()) == []


def test_agent_cannot_see_or_signal_another_attempt(envs_dir: Path, tmp_path: Path) -> None:
    image = base_image(docker_engine())
    tag = str(2000 + int.from_bytes(os.urandom(2), "big"))

    async def run_victim() -> tuple[str, Any]:
        async with started_sandbox(image) as victim:
            await victim.exec(f"nohup sleep {tag} >/dev/null 2>&1 &")
            deadline = time.monotonic() + 10
            while not (pids := _host_processes(f"sleep\0{tag}\0".encode())) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert pids, "the victim's process is not visible on the host"
            probe = (
                f"{{ ps -eo pid,args; kill -9 {pids[0]}; pkill -9 -f 'sleep {tag}'; echo done; }}"
                " > probe.txt 2>&1; true"
            )
            _, snapshot = await asyncio.to_thread(
                attack, envs_dir, tmp_path, [{"bash": probe}, {"submit": None}]
            )
            return (snapshot / "probe.txt").read_text(), await victim.exec(f"pgrep -f 'sleep {tag}'")

    seen, still_there = asyncio.run(run_victim())
    assert f"sleep {tag}" not in [line.strip().split(None, 1)[-1] for line in seen.splitlines()]
    assert "No such process" in seen and "done" in seen
    assert still_there.ok and still_there.stdout.strip()


def test_sigkill_of_the_harness_then_gc_leaves_no_container(envs_dir: Path, tmp_path: Path) -> None:
    from rebench.sandbox.docker import LABEL_OWNER

    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"sleep": 120}, {"submit": None}]}))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rebench.cli.app",
            "run",
            "--env",
            "vault",
            "--agent",
            "replay",
            "--agent-arg",
            f"script={script}",
            "--profile",
            "tiny",
            "--budget",
            "5m",
            "--backend",
            "docker",
            "--db",
            str(tmp_path / "killed.db"),
        ],
        cwd=REPO,
        env={**os.environ, "REBENCH_ENVIRONMENTS": str(envs_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    engine = docker_engine()

    def ours() -> list[str]:
        return [
            c[0]
            for c in engine.containers()
            if c[3].get(LABEL_OWNER, "").split(":")[1:2] == [str(process.pid)]
        ]

    deadline = time.monotonic() + 120
    while not ours() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    assert ours(), "no container appeared for the attempt"
    time.sleep(1.0)
    process.send_signal(signal.SIGKILL)
    process.wait()
    gc = cli("gc", "--json")
    assert gc.returncode == 0, gc.stderr
    json.loads(gc.stdout)
    deadline = time.monotonic() + 15
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ours() == []


def test_a_container_removed_mid_attempt_is_an_infrastructure_error_retried_once(
    envs_dir: Path, tmp_path: Path
) -> None:
    from rebench.sandbox.docker import LABEL_OWNER

    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": "sleep 8"}, {"submit": None}]}))
    db = tmp_path / "retry.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "rebench.cli.app", "run", "--env", "vault", "--agent", "replay",
         "--agent-arg", f"script={script}", "--profile", "tiny", "--budget", "3m", "--backend", "docker",
         "--db", str(db)],
        cwd=REPO, env={**os.environ, "REBENCH_ENVIRONMENTS": str(envs_dir)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    engine = docker_engine()
    deadline = time.monotonic() + 120
    victim: list[str] = []
    while not victim and time.monotonic() < deadline and process.poll() is None:
        victim = [c[0] for c in engine.containers()
                  if c[3].get(LABEL_OWNER, "").split(":")[1:2] == [str(process.pid)]]
        time.sleep(0.2)
    assert victim, "no container appeared for the attempt"
    time.sleep(3.0)  # inside `sleep 8`, after setup and the baseline score
    engine.remove_container(victim[0])
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select id, status, error_source, retry_of from attempts order by id").fetchall()
    assert len(rows) == 2, rows
    (first_id, first_status, first_source, _), (_, second_status, _, retry_of) = rows
    assert (first_status, first_source) == ("error", "infrastructure")
    assert second_status == "done" and retry_of == first_id


def test_a_disk_filler_ends_the_attempt_as_a_disk_limit(envs_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"bash": "dd if=/dev/zero of=fill bs=1M count=300 status=none"},
        {"bash": "sleep 12"},
        {"bash": "echo still here > after.txt"},
        {"submit": None},
    ]}))
    db = tmp_path / "disk.db"
    result = cli("run", "--env", "vault", "--agent", "replay", "--agent-arg", f"script={script}",
                 "--profile", "tiny", "--budget", "3m", "--backend", "docker", "--db", str(db),
                 env={"REBENCH_ENVIRONMENTS": str(envs_dir), "REBENCH_DISK_LIMIT_GB": "0.1"})
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db) as connection:
        status, reason, snapshot = connection.execute(
            "select status, limit_reason, snapshot_path from attempts").fetchone()
    assert (status, reason) == ("limit", "disk")
    assert not (Path(snapshot) / "after.txt").exists()
