"""The sandbox contract (rebench/sandbox/base.py), checked the same way on every backend.

Each check runs once per backend, each param pinned to its backend (never "whatever
answers"): `local` here, `docker` against the real engine (marked `docker`). What only
one backend does stays in its own file: Docker's users, ownership, resource limits
(memory, processes, disk), network and labels in tests/test_docker_sandbox.py; the
local backend enforces no resource limit (it is not an isolation boundary), so the
limits both share are a command's timeout and its output cap, checked here.

Command rules:

- a command that hits its timeout is killed with everything it started (a `setsid`
  child, one ignoring SIGTERM), and what it printed until then comes back with
  `timed_out` set;
- the call ends when the command's shell exits: a background child that keeps the
  output pipes open does not hold it until the timeout; the child keeps running, and
  what it prints after a short grace is not captured: once the call has returned, a
  child still writing to the call's output gets SIGPIPE (as after a closed terminal);
- a cancelled call kills its command's tree;
- `stop()` kills everything the attempt started.

Sleep durations are drawn per test so that processes of tests running in parallel on
this machine (other checkouts) are never counted.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rebench.errors import SandboxError
from rebench.sandbox.base import ExecResult, Sandbox, SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.sandbox.output import TRUNCATION_MARKER

from .docker_support import base_image, docker_engine, started_sandbox

T = TypeVar("T")
_roots = itertools.count()


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@functools.cache
def _docker_image() -> str:
    return base_image(docker_engine())


@asynccontextmanager
async def started(backend: str, tmp_path: Path, **spec: Any) -> AsyncIterator[Sandbox]:
    """A started sandbox of exactly `backend`, stopped on the way out."""
    if backend == "docker":
        async with started_sandbox(_docker_image(), **spec) as docker_sandbox:
            yield docker_sandbox
        return
    assert backend == "local"
    fields = {"attempt_id": 1, "environment": "contract", "profile": "tiny", **spec}
    sandbox = LocalSandbox(SandboxSpec(**fields), tmp_path / f"attempt-{next(_roots)}", sys.executable)
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.stop()


def run_in(backend: str, tmp_path: Path, body: Callable[[Sandbox], Awaitable[T]]) -> T:
    if backend == "docker":
        _docker_image()  # built (or skipped) before the clock of any check starts

    async def go() -> T:
        async with started(backend, tmp_path) as sandbox:
            return await body(sandbox)

    return asyncio.run(go())


def _seconds() -> str:
    """A sleep duration no other test uses, to find its processes by their command line."""
    return str(random.randrange(5_000_000, 9_000_000))


def _pattern(seconds: str) -> str:
    """A pgrep pattern for `sleep SECONDS` that does not match the shell running pgrep."""
    return f"sleep {seconds[:-1]}[{seconds[-1]}]"


def _host_processes(needle: str) -> list[int]:
    """Processes on this machine whose command line holds `needle` (a Docker engine on this
    host shows its containers' processes here too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle.encode() in (entry / "cmdline").read_bytes().replace(b"\0", b" "):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def _seen_on_host(needle: str, within_s: float = 5.0) -> list[int]:
    """`_host_processes`, waiting a little: a process in the middle of an exec (nohup, then
    setsid, then sleep) shows no command line for a moment."""
    deadline = time.monotonic() + within_s
    while not (found := _host_processes(needle)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return found


def test_exec_returns_streams_exit_code_and_runs_where_asked(backend: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBENCH_CONTRACT_LEAK", "harness secret")

    async def body(sb: Sandbox) -> dict[str, Any]:
        await sb.write_file("sub/.keep", b"")  # makes the solution folder where the image has none
        return {
            "failing": await sb.exec("echo out; echo err >&2; exit 3"),
            "stdin": await sb.exec(["cat"], stdin=b"x" * 300_000),
            "env": await sb.exec("echo $FOO $REBENCH_SOLUTION ${REBENCH_CONTRACT_LEAK-unset}", env={"FOO": "bar"}),
            "missing": await sb.exec(["no-such-program"]),
            "home": await sb.exec("pwd"),
            "absolute": await sb.exec("pwd", cwd="/tmp"),
            "relative": await sb.exec("pwd", cwd="sub"),
            "solution": sb.paths.solution,
        }

    out = run_in(backend, tmp_path, body)
    solution = out["solution"]
    assert (out["failing"].exit_code, out["failing"].stdout, out["failing"].stderr) == (3, "out\n", "err\n")
    assert not out["failing"].ok and not out["failing"].timed_out and not out["failing"].truncated
    assert out["stdin"].stdout == "x" * 300_000 and out["stdin"].ok
    assert out["env"].stdout == f"bar {solution} unset\n"  # nothing of the harness's environment leaks in
    assert out["missing"].exit_code == 127 and "no-such-program" in out["missing"].stderr
    assert out["home"].stdout == f"{solution}\n"
    assert out["absolute"].stdout == "/tmp\n"
    assert out["relative"].stdout == f"{solution}/sub\n"


def test_a_timeout_keeps_the_output_and_kills_the_whole_tree(backend: str, tmp_path: Path) -> None:
    tree = [_seconds() for _ in range(3)]

    async def body(sb: Sandbox) -> dict[str, Any]:
        started_at = time.monotonic()
        timed_out = await sb.exec("echo before; echo warn >&2; sleep 30; echo later", timeout=1)
        timed_out_s = time.monotonic() - started_at
        killed = await sb.exec(
            f"sleep {tree[0]} & setsid sleep {tree[1]} & (trap '' TERM; sleep {tree[2]}) & echo x; sleep 60",
            timeout=1,
        )
        left = await sb.exec(f"pgrep -fc 'sleep ({'|'.join(tree)})' || true")
        return {"timed_out": timed_out, "timed_out_s": timed_out_s, "killed": killed, "left": left}

    out = run_in(backend, tmp_path, body)
    timed_out: ExecResult = out["timed_out"]
    assert timed_out.timed_out and timed_out.exit_code is None and not timed_out.ok
    assert (timed_out.stdout, timed_out.stderr) == ("before\n", "warn\n")
    assert out["timed_out_s"] < 5
    assert out["killed"].timed_out and out["killed"].stdout == "x\n"
    assert out["left"].stdout.strip() == "0"


def test_background_children_neither_hold_the_call_nor_outlive_a_cancellation(backend: str, tmp_path: Path) -> None:
    kept, cancelled = _seconds(), _seconds()

    async def body(sb: Sandbox) -> dict[str, Any]:
        out: dict[str, Any] = {}
        started_at = time.monotonic()
        out["background"] = await sb.exec(f"sleep {kept} & echo started", timeout=30)
        out["background_s"] = time.monotonic() - started_at
        started_at = time.monotonic()
        out["chatty"] = await sb.exec("(while true; do echo tick; sleep 0.05; done) & echo started", timeout=30)
        out["chatty_s"] = time.monotonic() - started_at
        task = asyncio.create_task(sb.exec(f"sleep {cancelled}; echo never"))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        out["chatty_left"] = await sb.exec("pgrep -fc 'echo tic[k]' || true")
        out["still_running"] = await sb.exec(f"pgrep -fc '{_pattern(kept)}'")
        out["after_cancel"] = await sb.exec(f"pgrep -fc '{_pattern(cancelled)}' || true")
        return out

    out = run_in(backend, tmp_path, body)
    background: ExecResult = out["background"]
    assert (background.exit_code, background.stdout, background.timed_out) == (0, "started\n", False)
    assert out["background_s"] < 3
    chatty: ExecResult = out["chatty"]
    assert chatty.exit_code == 0 and "started" in chatty.stdout.splitlines() and out["chatty_s"] < 3
    assert out["chatty_left"].stdout.strip() == "0"  # SIGPIPE once the call returned
    assert out["still_running"].stdout.strip() == "1"  # a background process outlives its command
    assert out["after_cancel"].stdout.strip() == "0"  # but not a cancellation of its call


def test_output_is_capped_to_its_head_and_tail(backend: str, tmp_path: Path) -> None:
    async def body(sb: Sandbox) -> list[ExecResult]:
        return [
            await sb.exec("head -c 6000000 /dev/zero | tr '\\0' a; echo END"),
            await sb.exec("echo START >&2; head -c 3000000 /dev/zero | tr '\\0' b >&2"),
            await sb.exec("head -c 1000000 /dev/zero | tr '\\0' c"),
        ]

    huge, errors, at_the_cap = run_in(backend, tmp_path, body)
    head, tail = huge.stdout.split(TRUNCATION_MARKER.format(dropped=5_000_004))
    assert huge.truncated and head == "a" * 500_000 and tail == "a" * 499_996 + "END\n"
    head, tail = errors.stderr.split(TRUNCATION_MARKER.format(dropped=2_000_006))
    assert errors.truncated and errors.stdout == ""
    assert head == "START\n" + "b" * 499_994 and tail == "b" * 500_000
    assert not at_the_cap.truncated and at_the_cap.stdout == "c" * 1_000_000


def test_files_in_and_out(backend: str, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"stale")
    (source / "top.txt").write_text("top\n")
    out = tmp_path / "out"

    async def body(sb: Sandbox) -> dict[str, Any]:
        await sb.copy_in(str(source), sb.paths.solution)
        read_only = sb.paths.in_home("ro")
        await sb.copy_in(str(source), read_only, user="root", read_only=True)
        await sb.write_file("note.txt", b"hello")
        await sb.write_file("deep/er/run.sh", b"#!/bin/sh\necho ran\n", mode=0o755)
        await sb.exec("ln -s /etc/passwd abs; ln -s pkg/a.py rel")
        results: dict[str, Any] = {
            "note": await sb.read_file("note.txt"),
            "absolute": await sb.read_file(f"{sb.paths.solution}/pkg/a.py"),
            "seen": await sb.exec("cat note.txt; echo; deep/er/run.sh; ls pkg"),
            "modes": await sb.exec(f"stat -c %a {read_only}/top.txt {read_only}/pkg/a.py"),
        }
        for missing, error in (("missing.txt", FileNotFoundError), ("pkg", IsADirectoryError)):
            with pytest.raises(error):
                await sb.read_file(missing)
        with pytest.raises(SandboxError, match="not a directory"):
            await sb.copy_in(str(source / "top.txt"), "elsewhere")
        results["report"] = await sb.copy_out(sb.paths.solution, str(out))
        with pytest.raises(FileNotFoundError):
            await sb.copy_out(sb.paths.in_home("no-such-folder"), str(tmp_path / "nothing"))
        return results

    results = run_in(backend, tmp_path, body)
    assert results["note"] == b"hello" and results["absolute"] == b"A = 1\n"
    assert results["seen"].stdout == "hello\nran\na.py\n"  # no __pycache__ copied in
    assert results["modes"].stdout.split() == ["444", "444"]
    assert (out / "pkg" / "a.py").read_text() == "A = 1\n" and (out / "top.txt").read_text() == "top\n"
    assert (out / "deep" / "er" / "run.sh").stat().st_mode & 0o100
    assert (out / "rel").is_symlink() and (out / "rel").read_text() == "A = 1\n"
    assert not (out / "abs").exists() and not (out / "abs").is_symlink()  # a link out of the folder is dropped
    assert any(item.path == "abs" for item in results["report"].left_out)


def test_stop_kills_everything_and_ends_the_sandbox(backend: str, tmp_path: Path) -> None:
    lingering = _seconds()

    async def body() -> dict[str, Any]:
        async with started(backend, tmp_path) as sb:
            await sb.exec(f"nohup setsid sleep {lingering} >/dev/null 2>&1 &")
            alive_before = await sb.alive()
            running = await _seen_on_host(f"sleep {lingering}")
        after: dict[str, Any] = {"alive_before": alive_before, "running": running, "alive_after": await sb.alive()}
        after["left"] = _host_processes(f"sleep {lingering}")
        with pytest.raises(SandboxError):
            await sb.exec("true")
        await sb.stop()  # a second stop is harmless
        return after

    if backend == "docker":
        _docker_image()
    after = asyncio.run(body())
    assert after["alive_before"] and not after["alive_after"]
    if backend == "local" or os.environ.get("DOCKER_HOST", "unix://").startswith("unix://"):
        assert after["running"], "the background process should have been seen on this host"
    assert after["left"] == []


def test_kill_agent_processes_ends_the_agents_background_work_and_keeps_the_sandbox(backend: str,
                                                                                      tmp_path: Path) -> None:
    """What re-scoring relies on once the agent has ended: nothing the agent started (even in its
    own session) runs on, and the sandbox still runs commands afterwards."""
    lingering = _seconds()

    async def body(sb: Sandbox) -> dict[str, Any]:
        await sb.exec(f"nohup setsid sleep {lingering} >/dev/null 2>&1 &")
        before = await sb.exec(f"pgrep -fc '{_pattern(lingering)}' || true")
        killed = await sb.kill_agent_processes()
        await asyncio.sleep(0.2)
        after = await sb.exec(f"pgrep -fc '{_pattern(lingering)}' || true")
        return {"before": before.stdout.strip(), "killed": killed, "after": after, "alive": await sb.alive()}

    out = run_in(backend, tmp_path, body)
    assert out["before"] == "1" and out["killed"] >= 1
    assert out["after"].exit_code == 0 and out["after"].stdout.strip() == "0"
    assert out["alive"]
