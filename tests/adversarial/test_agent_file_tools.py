"""The agent's file tools act as the agent (Docker backend): `read_file`, `write_file` and
`upload_dir` of the runner's AttemptContext can reach exactly what the agent's own shell can.

Before, they went through the engine's archive API as root and only refused a path string
starting with `/protected`: `/./protected/...`, `//protected/...`, `/home/../protected/...`,
a symlink into `/protected`, a forged `/opt/rebench/score_helper.py` or an
`/etc/ld.so.preload` (root code execution) all went through."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rebench.agents.base import AgentConfig, EnvironmentInfo
from rebench.clock import AttemptClock
from rebench.context import AttemptContext, AttemptRecorder
from rebench.sandbox.agent_files import AGENT_FILE_LIMIT_BYTES
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus
from tests.docker_support import base_image, docker_engine, run, started_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]

SECRET = b"held-out answer 42\n"
FORGED = b"print('forged')\n"


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


@asynccontextmanager
async def agent_context(image: str, root: Path) -> AsyncIterator[tuple[AttemptContext, Any]]:
    """The runner's AttemptContext on a started container, with a secret under /protected."""
    async with started_sandbox(image) as sb:
        await sb.write_file("/protected/scoring/score.py", SECRET, user="root")
        await sb.write_file(f"{sb.paths.solution}/.keep", b"")
        store = Store(root / "attempts.db")
        with store.session() as session:
            attempt = Attempt(environment="test", profile="tiny", agent="adversary", model="none",
                              budget_s=600.0, status=AttemptStatus.RUNNING)
            session.add(attempt)
            session.flush()
            attempt_id = attempt.id
        clock = AttemptClock()
        clock.start()
        recorder = AttemptRecorder(store, attempt_id, clock)
        ctx = AttemptContext(
            sandbox=sb, recorder=recorder, clock=clock, instructions="", config=AgentConfig(name="adversary"),
            environment=EnvironmentInfo(name="test", title="test", version="0", profile="tiny",
                                        direction="higher", score_visible=True),
            budget_s=600.0, seed=0, score_timeout_s=60.0, reference_dir=None,
        )
        try:
            yield ctx, sb
        finally:
            recorder.close()


async def _unchanged(sb: Any, path: str, expected: bytes) -> None:
    assert await sb.read_file(path) == expected, f"{path} was changed through an agent tool"


def test_write_file_cannot_replace_the_scoring_helper_or_reach_protected(image: str, tmp_path: Path) -> None:
    async def body() -> None:
        async with agent_context(image, tmp_path) as (ctx, sb):
            helper = await sb.read_file(sb.paths.helper)
            await ctx.bash("ln -s /protected ~/p")
            for path in ("/opt/rebench/score_helper.py", "/./protected/scoring/score.py", "//protected/x",
                         "/home/../protected/x", "/home/agent/p/x", "/home/agent/p/scoring/score.py",
                         "../p/scoring/score.py", "/etc/ld.so.preload"):
                with pytest.raises(PermissionError):
                    await ctx.write_file(path, FORGED)
            await _unchanged(sb, sb.paths.helper, helper)
            await _unchanged(sb, "/protected/scoring/score.py", SECRET)
            listing = await sb.exec("ls -A /protected; ls -l /etc/ld.so.preload", user="root")
            assert listing.stdout.split() == ["results", "scoring"], listing.stdout
            assert "No such file" in listing.stderr

    run(body())


def test_read_file_cannot_read_protected_through_any_spelling(image: str, tmp_path: Path) -> None:
    async def body() -> None:
        async with agent_context(image, tmp_path) as (ctx, _sb):
            await ctx.bash("ln -s /protected ~/p && ln -s /protected/scoring/score.py ~/s")
            for path in ("/protected/scoring/score.py", "/./protected/scoring/score.py",
                         "//protected/scoring/score.py", "/home/../protected/scoring/score.py",
                         "/home/agent/p/scoring/score.py", "/home/agent/s", "../s"):
                with pytest.raises(PermissionError):
                    await ctx.read_file(path)

    run(body())


def test_upload_dir_cannot_write_where_the_agent_cannot(image: str, tmp_path: Path) -> None:
    source = tmp_path / "upload"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "score_helper.py").write_bytes(FORGED)

    async def body() -> None:
        async with agent_context(image, tmp_path) as (ctx, sb):
            helper = await sb.read_file(sb.paths.helper)
            for dest in ("/opt/rebench", "/./protected", "/etc"):
                with pytest.raises(PermissionError):
                    await ctx.upload_dir(source, dest)
            await _unchanged(sb, sb.paths.helper, helper)
            await ctx.upload_dir(source, "mine")  # the agent's own folder: fine, and owned by it
            owner = await sb.exec("stat -c %U:%a mine/pkg/score_helper.py")
            assert owner.stdout.split() == ["agent:644"], owner.stdout

    run(body())


def test_the_tools_succeed_exactly_when_the_agents_shell_does(image: str, tmp_path: Path) -> None:
    async def body() -> dict[str, tuple[bool, bool]]:
        async with agent_context(image, tmp_path) as (ctx, sb):
            solution = sb.paths.solution
            await sb.write_file("root644", b"root 644\n", user="root", mode=0o644)
            await sb.write_file("root600", b"root 600\n", user="root", mode=0o600)
            await ctx.bash("echo mine > mine; mkdir -p links; for t in mine root644 root600; do "
                           f"ln -s {solution}/$t links/$t; done; ln -s /protected/scoring/score.py links/protected; "
                           "ln -s /opt/rebench/score_helper.py links/helper; ln -s /etc/nope links/etc_new")
            targets = ["mine", "root644", "root600", "/protected/scoring/score.py", "/opt/rebench/score_helper.py",
                       "/etc/hostname", "/etc/nope", "links/mine", "links/root644", "links/root600",
                       "links/protected", "links/helper", "links/etc_new"]
            seen: dict[str, tuple[bool, bool]] = {}
            for target in targets:
                shell = await ctx.bash(f"cat -- {target} > /dev/null")
                try:
                    await ctx.read_file(target)
                    tool = True
                except OSError:
                    tool = False
                seen[f"read {target}"] = (tool, shell.ok)
            for target in targets:
                try:
                    await ctx.write_file(target, b"probe\n")
                    tool = True
                except OSError:
                    tool = False
                shell = await ctx.bash(f"printf 'probe\\n' | tee -- {target} > /dev/null")
                seen[f"write {target}"] = (tool, shell.ok)
            return seen

    seen = run(body())
    differ = {what: pair for what, pair in seen.items() if pair[0] != pair[1]}
    assert not differ, f"(tool, shell) differ: {differ}"
    assert seen["read mine"] == (True, True) and seen["write links/mine"] == (True, True)
    assert seen["read root644"] == (True, True) and seen["write root644"] == (False, False)
    assert seen["read links/protected"] == (False, False)


def test_reads_and_writes_past_the_limit_fail_clearly(image: str, tmp_path: Path) -> None:
    async def body() -> None:
        async with agent_context(image, tmp_path) as (ctx, _sb):
            await ctx.bash(f"head -c {AGENT_FILE_LIMIT_BYTES + 1} /dev/zero > big")
            with pytest.raises(OSError, match="limit"):
                await ctx.read_file("big")
            with pytest.raises(OSError, match="limit"):
                await ctx.write_file("big2", b"x" * (AGENT_FILE_LIMIT_BYTES + 1))
            data = bytes(range(256)) * 4096  # binary, 1 MiB: comes back byte for byte
            await ctx.write_file("bin", data)
            assert (await ctx.sandbox.agent_read_file("bin")) == data

    run(body())


def _writable_in(image: str) -> list[str]:
    from rebench.images.writable import agent_writable

    async def body() -> list[str]:
        async with started_sandbox(image) as sb:
            await sb.write_file(f"{sb.paths.solution}/.keep", b"")
            return await agent_writable(sb)

    return run(body())


def test_nothing_outside_the_agents_places_is_writable_by_the_agent_in_the_base_image(image: str) -> None:
    assert _writable_in(image) == []


def test_nothing_outside_the_agents_places_is_writable_by_the_agent_in_an_environment_image() -> None:
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.images.build import build_environment_image

    env = EnvironmentRegistry().get("triton_cumsum")
    assert _writable_in(build_environment_image(env, "tiny", engine=docker_engine())) == []
