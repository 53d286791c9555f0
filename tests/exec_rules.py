"""The rules every sandbox backend's `exec` follows for a tool call, checked the same way
on each backend (tests/test_local_sandbox.py, tests/test_docker_sandbox.py):

- a command that hits its timeout is killed with everything it started, and what it
  printed until then comes back with `timed_out` set;
- the call ends when the command's shell exits: a background child that keeps the
  output pipes open does not hold it until the timeout; the child keeps running, and
  what it prints after a short grace is not captured: once the call has returned, a
  child still writing to the call's output gets SIGPIPE (as after a closed terminal).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rebench.sandbox.base import ExecResult


async def exec_rule_results(sandbox: Any) -> dict[str, Any]:
    results: dict[str, Any] = {}
    started = time.monotonic()
    results["timed_out"] = await sandbox.exec("echo before; echo warn >&2; sleep 30; echo later", timeout=1)
    results["timed_out_s"] = time.monotonic() - started
    started = time.monotonic()
    results["background"] = await sandbox.exec("sleep 100017 & echo started", timeout=30)
    results["background_s"] = time.monotonic() - started
    started = time.monotonic()
    results["chatty"] = await sandbox.exec(
        "(while true; do echo tick; sleep 0.05; done) & echo started", timeout=30
    )
    results["chatty_s"] = time.monotonic() - started
    await asyncio.sleep(0.5)
    results["chatty_left"] = await sandbox.exec("pgrep -fc 'echo tic[k]' || true")
    results["still_running"] = await sandbox.exec("pgrep -fc 'sleep 10001[7]'")
    results["timeout_tree"] = await sandbox.exec("sleep 100018 & setsid sleep 100019 & echo x; sleep 60", timeout=1)
    results["killed"] = await sandbox.exec("pgrep -fc 'sleep 1000(18|19)' || true")
    return results


def assert_exec_rules(results: dict[str, Any]) -> None:
    timed_out: ExecResult = results["timed_out"]
    assert timed_out.timed_out and timed_out.exit_code is None
    assert (timed_out.stdout, timed_out.stderr) == ("before\n", "warn\n")
    assert results["timed_out_s"] < 5
    background: ExecResult = results["background"]
    assert (background.exit_code, background.stdout, background.timed_out) == (0, "started\n", False)
    assert results["background_s"] < 3
    chatty: ExecResult = results["chatty"]
    assert chatty.exit_code == 0 and chatty.stdout.startswith("started\n") and results["chatty_s"] < 3
    assert results["still_running"].stdout.strip() == "1"
    assert results["chatty_left"].stdout.strip() == "0"
    assert results["timeout_tree"].timed_out and results["timeout_tree"].stdout == "x\n"
    assert results["killed"].stdout.strip() == "0"
