"""A cancellation (Ctrl-C, a campaign stopping) must reach the code it interrupts, even when it
arrives in the very step the awaited work finishes.

On Python 3.11 `asyncio.wait_for` returns the inner result in that step and drops the cancel, so a
re-scoring interrupted as one scoring command exited ran on to the end and was recorded `done`
(tests/test_rescore.py's interrupt test failed so once). rebench bounds its waits with
`asyncio.timeout` instead; ruff's banned-api rule (pyproject.toml) keeps wait_for out of rebench/."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from rebench.sandbox import local_process
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.local import LocalSandbox


async def _cancelled_as_it_finishes(bounded: Any) -> str:
    """Cancel a task in the step its awaited event is set; say what the task then did."""
    event = asyncio.Event()

    async def waiter() -> str:
        await bounded(event.wait())
        return "returned"

    task = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    event.set()
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


async def _with_timeout(awaitable: Any) -> None:
    async with asyncio.timeout(10):
        await awaitable


def test_a_timeout_block_passes_on_a_cancel_that_wait_for_drops() -> None:
    assert asyncio.run(_cancelled_as_it_finishes(_with_timeout)) == "cancelled"
    dropped = asyncio.run(_cancelled_as_it_finishes(lambda awaitable: asyncio.wait_for(awaitable, 10)))
    # why wait_for is banned: 3.11 drops the cancel (3.12 rewrote wait_for on asyncio.timeout)
    assert dropped == ("returned" if sys.version_info < (3, 12) else "cancelled")


def test_a_command_cancelled_as_it_exits_raises_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local sandbox's exec, cancelled from the callback that sees its command exit (the step
    in which wait_for returned the result instead), raises CancelledError and kills nothing it
    should not: the command had ended."""
    sandbox = LocalSandbox(SandboxSpec(attempt_id=1, environment="t", profile="tiny"), tmp_path / "a", sys.executable)
    running: list[asyncio.Task[Any]] = []
    seen_exit = local_process.RunningCommand._on_exit

    def exit_then_cancel(self: local_process.RunningCommand) -> None:
        seen_exit(self)
        running[0].cancel()

    monkeypatch.setattr(local_process.RunningCommand, "_on_exit", exit_then_cancel)

    async def main() -> str:
        await sandbox.start()
        try:
            running.append(asyncio.create_task(sandbox.exec(["true"], timeout=30)))
            try:
                result = await running[0]
            except asyncio.CancelledError:
                return "cancelled"
            return f"returned exit code {result.exit_code}"
        finally:
            await sandbox.stop()

    assert asyncio.run(main()) == "cancelled"
