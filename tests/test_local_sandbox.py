"""The local backend's command rules (tests/exec_rules.py): output kept on timeout, background
children that hold the pipes do not block a call, a timeout kills the command's whole tree."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from rebench.sandbox.base import TRUNCATION_MARKER, SandboxSpec
from rebench.sandbox.local import LocalSandbox
from tests.exec_rules import assert_exec_rules, exec_rule_results


def with_local(tmp_path: Path, body: Any) -> Any:
    async def go() -> Any:
        sandbox = LocalSandbox(SandboxSpec(attempt_id=1, environment="t", profile="tiny"), tmp_path / "a",
                               sys.executable)
        await sandbox.start()
        try:
            return await body(sandbox)
        finally:
            await sandbox.stop()

    return asyncio.run(go())


def test_timeouts_keep_output_and_background_children_do_not_block(tmp_path: Path) -> None:
    assert_exec_rules(with_local(tmp_path, exec_rule_results))


def test_stdin_cwd_and_a_huge_output_kept_as_head_and_tail(tmp_path: Path) -> None:
    async def body(sb: LocalSandbox) -> list[Any]:
        return [
            await sb.exec(["cat"], stdin=b"x" * 300_000),
            await sb.exec("pwd"),
            await sb.exec("head -c 6000000 /dev/zero | tr '\\0' a; echo END"),
        ]

    piped, cwd, huge = with_local(tmp_path, body)
    assert piped.stdout == "x" * 300_000
    assert cwd.stdout.strip() == str(tmp_path / "a" / "home" / "solution")
    head, tail = huge.stdout.split(TRUNCATION_MARKER.format(dropped=5_000_004))
    assert huge.truncated and head == "a" * 500_000 and tail == "a" * 499_996 + "END\n"
