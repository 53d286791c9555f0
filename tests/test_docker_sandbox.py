"""What only the docker backend does, against a real engine: users and ownership, resource
limits (memory, processes, disk), network, labels, a container removed under it, and gc.
The contract every backend keeps (exec, timeouts, output caps, process trees, files, stop)
is tests/test_sandbox_contract.py."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from .docker_support import base_image, docker_engine, run, started_sandbox, with_sandbox

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


def test_users_and_the_protected_layout(image: str) -> None:
    async def body(sb: Any) -> dict[str, Any]:
        return {
            "agent": await sb.exec("id -u; id -G; echo $HOME; pwd"),
            "root": await sb.exec(["id", "-u"], user="root"),
            "scorer": await sb.exec(["id", "-Gn"], user="scorer"),
            "protected": await sb.exec("ls /protected"),
            "layout": await sb.exec(
                ["stat", "-c", "%U:%G %a", "/protected", "/home/agent", "/opt/rebench/score_helper.py"],
                user="root",
            ),
            "write_helper": await sb.exec("echo x >> /opt/rebench/score_helper.py"),
        }

    out = with_sandbox(image, body)
    assert out["agent"].stdout.split() == ["1000", "1000", "/home/agent", "/home/agent"]
    assert out["root"].stdout.strip() == "0"
    assert set(out["scorer"].stdout.split()) == {"scorer", "protected"}  # its own user, not the agent's
    assert out["protected"].exit_code != 0 and "Permission denied" in out["protected"].stderr
    assert out["layout"].stdout.split("\n")[:3] == ["root:protected 2770", "agent:agent 755", "root:root 755"]
    assert out["write_helper"].exit_code != 0


def test_files_are_owned_as_the_layout_says(image: str, tmp_path: Path) -> None:
    """Beyond the contract's files in and out: the agent owns what it is given, read-only
    files are root's, and /protected is root:protected and closed to the agent."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")

    async def body(sb: Any) -> list[Any]:
        await sb.copy_in(str(tmp_path), sb.paths.solution)
        await sb.copy_in(str(tmp_path), "/home/agent/ro", user="root", read_only=True)
        await sb.write_file("/protected/params.json", b"{}", user="root", mode=0o640)
        return [
            await sb.exec("stat -c '%U %a' pkg/a.py /home/agent/ro/pkg/a.py; echo hi >> /home/agent/ro/pkg/a.py"),
            await sb.exec("stat -c '%U:%G %a' /protected/params.json", user="root"),
            await sb.exec("cat /protected/params.json"),
            await sb.read_file("/protected/params.json"),
        ]

    owners, protected, agent_reads, params = with_sandbox(image, body)
    assert owners.stdout.split("\n")[:2] == ["agent 644", "root 444"] and owners.exit_code != 0
    assert protected.stdout.strip() == "root:protected 640"
    assert agent_reads.exit_code != 0 and params == b"{}"


def test_limits_contain_fork_bombs_and_memory_hogs(image: str) -> None:
    async def body(sb: Any) -> tuple[Any, Any, Any]:
        bomb = await sb.exec("bomb() { bomb | bomb; }; bomb", timeout=3)
        hog = await sb.exec(["python3", "-c", "x = bytearray(3 * 1024**3); print('allocated')"], timeout=60)
        return bomb, hog, await sb.exec("echo alive")

    bomb, hog, alive = with_sandbox(image, body, memory_gb=0.5, max_processes=64)
    assert bomb.timed_out and "Resource temporarily unavailable" in bomb.stderr
    assert hog.exit_code != 0 and "allocated" not in hog.stdout
    assert alive.stdout == "alive\n"


def test_no_network_by_default_and_on_request(image: str) -> None:
    probe = 'python3 -c "import socket; print(sorted(n for _, n in socket.if_nameindex()))"'
    offline = with_sandbox(image, lambda sb: sb.exec(probe))
    online = with_sandbox(image, lambda sb: sb.exec(probe), network="full")
    assert offline.stdout.strip() == "['lo']"
    assert "eth0" in online.stdout


def test_labels_health_and_removal_on_stop(image: str) -> None:
    engine = docker_engine()

    async def body() -> tuple[dict[str, str], bool, bool, str]:
        async with started_sandbox(image, campaign_id=7) as sb:
            labels = engine.client.containers.get(sb.container_id).labels
            assert sb.start_to_ready_s is not None and sb.start_to_ready_s < 10
            alive = await sb.alive()
            container_id = sb.container_id
        return labels, alive, await sb.alive(), container_id

    labels, alive_before, alive_after, container_id = run(body())
    assert labels["rebench.campaign"] == "7" and labels["rebench.attempt"].isdigit()
    assert alive_before and not alive_after
    assert container_id not in [c[0] for c in engine.containers()]


def test_a_removed_container_is_an_infrastructure_error(image: str) -> None:
    from rebench.errors import SandboxDied

    engine = docker_engine()

    async def body() -> None:
        async with started_sandbox(image) as sb:
            import asyncio

            pending = asyncio.create_task(sb.exec("sleep 60"))
            await asyncio.sleep(0.3)
            engine.remove_container(sb.container_id)
            with pytest.raises(SandboxDied):
                await asyncio.wait_for(pending, 30)
            assert not await sb.alive()

    run(body())


def test_gc_keeps_running_attempts_and_removes_orphans(image: str) -> None:
    import socket

    from rebench.images import collect_garbage
    from rebench.sandbox.docker import LABEL_OWNER

    engine = docker_engine()

    async def body() -> None:
        async with started_sandbox(image) as sb:
            kept = collect_garbage(engine)
            assert sb.container_id in [c[0] for c in engine.containers()]
            assert await sb.alive()
            # An orphan: a container whose harness process is gone (a pid that cannot exist).
            dead_owner = f"{socket.gethostname()}:999999999:1"
            orphan = engine.client.containers.create(
                image, ["sleep", "60"], labels={"rebench.attempt": "1", LABEL_OWNER: dead_owner}
            )
            removed = collect_garbage(engine)
            assert orphan.name in removed.removed_containers and sb.container_id not in removed.removed_containers
            assert any(name.startswith("rebench-a") for name in kept.kept_running)
            assert await sb.alive()

    run(body())


def test_nothing_started_by_a_scoring_run_outlives_it(image: str) -> None:
    async def body(sb: Any) -> tuple[Any, Any]:
        scored = await sb.exec("nohup setsid sleep 311 >/dev/null 2>&1 & echo started", user="scorer")
        return scored, await sb.exec("ps -eo args | grep '^sleep 311' || true", user="root")

    scored, left = with_sandbox(image, body)
    assert scored.stdout == "started\n"
    assert left.stdout.strip() == ""


def test_a_disk_filler_is_stopped_and_ends_as_a_disk_limit(image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's disk has the limit's size: the filler stops at ENOSPC (or is killed by the watch), and
    once the watch sees the full disk the agent's next command is refused as a disk limit."""
    import asyncio

    from rebench.errors import LimitExceeded
    from rebench.sandbox.docker import sandbox as docker_backend

    monkeypatch.setenv("REBENCH_DISK_LIMIT_GB", "0.1")
    monkeypatch.setattr(docker_backend, "DISK_POLL_S", 0.5)

    async def body(sb: Any) -> tuple[Any, Any]:
        filler = asyncio.create_task(sb.exec("dd if=/dev/zero of=fill bs=1M count=100000 status=none", timeout=120))
        done, _ = await asyncio.wait({filler}, timeout=60)
        assert done, "the disk filler was not stopped"
        for _ in range(40):
            try:
                await sb.exec("true")
            except LimitExceeded as exc:
                return filler.result(), exc
            await asyncio.sleep(0.25)
        pytest.fail("the agent's commands went on on a full disk")

    filled, refused = with_sandbox(image, body)
    assert filled.exit_code != 0 and not filled.timed_out
    assert refused.which == "disk"


def test_a_container_left_with_its_agent_frozen_is_removed(image: str) -> None:
    """A harness SIGKILLed during a score call leaves the agent's cgroup frozen. A frozen process cannot
    die, so the engine could not kill such a container ("did not receive an exit event") and `rebench gc`
    failed on it; removing a container thaws what was left frozen first."""
    from rebench.sandbox.docker.cgroups import AgentCgroup

    engine = docker_engine()
    container = engine.client.containers.run(image, ["sleep", "600"], detach=True,
                                             labels={"rebench.attempt": "1", "rebench.owner": "gone:1:1"})
    try:
        container.reload()
        cgroup = AgentCgroup.of_process(int(container.attrs["State"]["Pid"]))
        cgroup.create(64)
        container.exec_run(["sh", "-c", "sleep 600 & echo $! > /tmp/agent.pid"])
        inner = int(container.exec_run(["cat", "/tmp/agent.pid"]).output.decode().strip())
        cgroup.place(inner)
        cgroup.freeze()
        assert cgroup.is_frozen() and cgroup.agent_pids()
        assert engine.remove_container(str(container.id)) is True
        assert str(container.id) not in [c[0] for c in engine.containers("rebench.attempt")]
    finally:
        with contextlib.suppress(Exception):
            cgroup.thaw()
        with contextlib.suppress(Exception):
            container.remove(force=True)
