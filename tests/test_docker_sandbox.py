"""The docker backend against a real engine: users, limits, the exec channel, files,
timeouts that kill whole process trees, and cleanup."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rebench.sandbox.base import TRUNCATION_MARKER

from .docker_support import base_image, docker_engine, run, started_sandbox, with_sandbox
from .exec_rules import assert_exec_rules, exec_rule_results

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


def test_stdout_stderr_stdin_env_and_exit_codes(image: str) -> None:
    async def body(sb: Any) -> list[Any]:
        return [
            await sb.exec("echo out; echo err >&2; exit 3"),
            await sb.exec(["cat"], stdin=b"piped in\n"),
            await sb.exec("echo $FOO", env={"FOO": "bar"}),
            await sb.exec(["no-such-program"]),
            await sb.exec("pwd", cwd="/tmp"),
        ]

    failing, piped, env, missing, cwd = with_sandbox(image, body)
    assert (failing.exit_code, failing.stdout, failing.stderr) == (3, "out\n", "err\n")
    assert piped.stdout == "piped in\n"
    assert env.stdout == "bar\n"
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr
    assert cwd.stdout == "/tmp\n"


def test_large_output_is_capped_with_a_marker(image: str) -> None:
    result = with_sandbox(image, lambda sb: sb.exec("head -c 3000000 /dev/zero | tr '\\0' a"))
    assert result.truncated
    head, tail = result.stdout.split(TRUNCATION_MARKER.format(dropped=2_000_000))
    assert head == "a" * 500_000 and tail == "a" * 500_000


def test_timeout_kills_the_whole_tree_even_after_setsid(image: str) -> None:
    async def body(sb: Any) -> tuple[Any, Any]:
        result = await sb.exec(
            "sleep 300 & setsid sleep 301 & (trap '' TERM; sleep 302) & sleep 303", timeout=1
        )
        survivors = await sb.exec("ps -eo args | grep '^sleep' || true", user="root")
        return result, survivors

    started = time.monotonic()
    result, survivors = with_sandbox(image, body)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 20
    assert survivors.stdout.strip() == ""


def test_timeouts_keep_output_and_background_children_do_not_block(image: str) -> None:
    """The same rules as the local backend (tests/exec_rules.py)."""
    assert_exec_rules(with_sandbox(image, exec_rule_results))


def test_background_processes_outlive_their_command_but_not_a_cancellation(image: str) -> None:
    import asyncio

    async def body(sb: Any) -> tuple[Any, Any, Any]:
        await sb.exec("nohup sleep 200 >/dev/null 2>&1 &")
        kept = await sb.exec("pgrep -x sleep | wc -l")
        task = asyncio.create_task(sb.exec("sleep 400; echo never"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after_cancel = await sb.exec("ps -eo args | grep '^sleep 400' || true", user="root")
        return kept, after_cancel, await sb.exec("true")

    kept, after_cancel, still_usable = with_sandbox(image, body)
    assert kept.stdout.strip() == "1"
    assert after_cancel.stdout.strip() == ""
    assert still_usable.ok


def test_files_in_and_out(image: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "top.txt").write_text("top\n")
    out = tmp_path / "out"

    async def body(sb: Any) -> list[Any]:
        await sb.copy_in(str(source), sb.paths.solution)
        await sb.copy_in(str(source), "/home/agent/ro", user="root", read_only=True)
        await sb.write_file("note.txt", b"hello")
        await sb.write_file("/protected/params.json", b"{}", user="root", mode=0o640)
        await sb.exec(
            "ln -s /protected/params.json link; ln -s /etc/passwd abs; mkdir -p deep/er; echo x > deep/er/f"
        )
        results = [
            await sb.read_file("note.txt"),
            await sb.exec(
                "stat -c '%U %a' pkg/a.py /home/agent/ro/top.txt; echo hi >> /home/agent/ro/top.txt"
            ),
            await sb.read_file("/protected/params.json"),
        ]
        await sb.copy_out(sb.paths.solution, str(out))
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing.txt")
        return results

    note, owners, params = with_sandbox(image, body)
    assert note == b"hello" and params == b"{}"
    lines = owners.stdout.split("\n")
    assert lines[:2] == ["agent 644", "root 444"] and owners.exit_code != 0
    assert (out / "pkg" / "a.py").read_text() == "A = 1\n"
    assert (out / "note.txt").read_text() == "hello"
    assert (out / "deep" / "er" / "f").read_text() == "x\n"
    assert not (out / "abs").exists()  # an absolute symlink out of the snapshot is dropped


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
    online = with_sandbox(image, lambda sb: sb.exec(probe), network=True)
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
    from rebench.errors import SandboxError

    engine = docker_engine()

    async def body() -> None:
        async with started_sandbox(image) as sb:
            import asyncio

            pending = asyncio.create_task(sb.exec("sleep 60"))
            await asyncio.sleep(0.3)
            engine.remove_container(sb.container_id)
            with pytest.raises(SandboxError):
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
    import asyncio

    from rebench.agents.base import LimitExceeded
    from rebench.sandbox.docker import sandbox as docker_backend

    monkeypatch.setenv("REBENCH_DISK_LIMIT_GB", "0.1")
    monkeypatch.setattr(docker_backend, "DISK_POLL_S", 0.5)

    async def body(sb: Any) -> tuple[Any, Any]:
        filler = asyncio.create_task(sb.exec("dd if=/dev/zero of=fill bs=1M count=100000 status=none", timeout=120))
        done, _ = await asyncio.wait({filler}, timeout=60)
        assert done, "the disk filler was not stopped"
        with pytest.raises(LimitExceeded) as refused:
            await sb.exec("true")
        return filler.result(), refused.value

    filled, refused = with_sandbox(image, body)
    assert filled.exit_code == 137 and not filled.timed_out
    assert refused.which == "disk"
