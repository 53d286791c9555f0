"""Attacks on the freeze and on the harness's capacity (issue 24, routes 5 and 7), on a real
Docker engine with the base image.

- A process that installs a SIGCONT handler and a POSIX timer sending itself SIGCONT every
  50 ms woke up again after a SIGSTOP freeze (the kernel delivers the timer's SIGCONT to a
  stopped process) and ran through every scoring call. The cgroup freezer cannot be undone
  by a signal.
- A fork bomb filled the container's process limit, so every later command of the harness
  failed. The agent's processes now live in their own cgroup with their own limit, below the
  container's; the harness's commands start beside them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.docker_support import base_image, docker_engine, run, started_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker]

WAKER = r"""
import ctypes, signal, sys, time
# A POSIX timer (timer_create with SIGEV_SIGNAL) that sends SIGCONT every 50 ms, and a handler:
# the kernel delivers SIGCONT to a stopped process, which then runs on.
signal.signal(signal.SIGCONT, lambda *_: None)
libc = ctypes.CDLL(None, use_errno=True)

class SigEvent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("pad", ctypes.c_byte * 48)]

class Spec(ctypes.Structure):
    _fields_ = [("interval_s", ctypes.c_long), ("interval_ns", ctypes.c_long),
                ("value_s", ctypes.c_long), ("value_ns", ctypes.c_long)]

event = SigEvent(None, signal.SIGCONT, 0)  # SIGEV_SIGNAL
timer = ctypes.c_void_p()
assert libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) == 0  # CLOCK_MONOTONIC
spec = Spec(0, 50_000_000, 0, 50_000_000)
assert libc.timer_settime(timer, 0, ctypes.byref(spec), None) == 0
with open(sys.argv[1], "a", buffering=1) as out:
    while True:
        out.write(f"{time.time():.3f}\n")
        time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


def beats_between(log: str, start: float, end: float) -> int:
    return sum(1 for line in log.split() if start < float(line) < end)


def test_a_sigcont_timer_does_not_run_through_a_score_call(image: str) -> None:
    async def body(sb: Any) -> tuple[Any, str, Any]:
        await sb.write_file("waker.py", WAKER.encode())
        started = await sb.exec("setsid nohup python3 waker.py /tmp/beats >/dev/null 2>&1 < /dev/null & sleep 0.5")
        assert started.ok, started.stderr
        scored = await sb.exec("date +%s.%N; sleep 2; date +%s.%N", user="scorer", timeout=30)
        await asyncio.sleep(0.5)
        log = (await sb.exec("cat /tmp/beats")).stdout
        return scored, log, await sb.exec("tail -1 /tmp/beats")

    async def go() -> tuple[Any, str, Any]:
        async with started_sandbox(image) as sb:
            return await body(sb)

    scored, log, last = run(go())
    start, end = (float(x) for x in scored.stdout.split())
    assert beats_between(log, start + 0.05, end - 0.05) == 0, "the agent's process ran during the score call"
    assert float(last.stdout) > end  # and it runs again after it: an honest job survives


def test_a_fork_bomb_leaves_the_harness_able_to_score_and_kill_it(image: str) -> None:
    bomb = "b() { b | b & }; b"

    async def body(sb: Any) -> tuple[Any, Any, int, Any, Any]:
        await sb.exec(f"( setsid bash -c '{bomb}' >/dev/null 2>&1 < /dev/null & ) ; sleep 0.2", timeout=20)
        await asyncio.sleep(4)  # let it fill the agent's limit
        scored = await sb.exec(["python3", "-c", "import threading; print('scored')"], user="scorer", timeout=60)
        snapshot_like = await sb.exec(["true"], user="root", timeout=60)
        killed = await sb.kill_agent_processes()
        after = await sb.exec("ps -u agent -o args= | grep -c '[b] | b'", timeout=60)
        again = await sb.exec("echo alive", timeout=60)
        return scored, snapshot_like, killed, after, again

    async def go() -> tuple[Any, Any, int, Any, Any]:
        async with started_sandbox(image, max_processes=256) as sb:
            return await body(sb)

    scored, snapshot_like, killed, after, again = run(go())
    assert scored.ok and scored.stdout.strip() == "scored", (scored.stdout, scored.stderr)
    assert snapshot_like.ok, snapshot_like.stderr
    assert killed > 100
    assert after.stdout.strip() == "0"  # nothing of the bomb is left
    assert again.ok and again.stdout.strip() == "alive"


def test_the_agents_cgroup_is_frozen_before_the_scorer_starts(image: str, tmp_path: Path) -> None:
    """Checked from the host: during a score call the kernel reports the agent's cgroup frozen
    and every process of the agent's user is in it."""

    async def body(sb: Any) -> tuple[bool, bool, list[int]]:
        await sb.exec("( setsid sleep 300 >/dev/null 2>&1 < /dev/null & ) ; sleep 0.2")
        cgroup = sb._cgroup
        seen: dict[str, Any] = {}

        async def watch() -> None:
            await asyncio.sleep(0.5)
            seen["frozen"] = cgroup.is_frozen()
            seen["stray"] = cgroup.escaped({1000})

        watcher = asyncio.create_task(watch())
        await sb.exec("sleep 1.5", user="scorer", timeout=30)
        await watcher
        return seen["frozen"], cgroup.is_frozen(), seen["stray"]

    async def go() -> tuple[bool, bool, list[int]]:
        async with started_sandbox(image) as sb:
            return await body(sb)

    during, after, stray = run(go())
    assert during and not after
    assert stray == []
