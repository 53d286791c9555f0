"""Shared pieces of the Docker tests: an engine (or a clean skip), the base image, and
a started sandbox. They skip only when no Docker engine answers; everything else
(a missing base image) is built, so CI with an engine always runs them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rebench.errors import SandboxError
from rebench.sandbox.base import SandboxSpec

T = TypeVar("T")
_attempt_ids = itertools.count(900_000)


def docker_engine() -> Any:
    from rebench.sandbox.docker import DockerEngine

    try:
        return DockerEngine.connect(timeout=3)
    except SandboxError as exc:
        pytest.skip(f"no Docker engine answers: {exc}")


def base_image(engine: Any) -> str:
    """This checkout's CPU base image (by its content hash, not `latest`, which another
    checkout sharing the engine may have moved); built when missing."""
    from rebench.images import bootstrap_raw_image, build_base_image, default_ca_bundle
    from rebench.images.naming import raw_image

    if engine.image_id(raw_image()) is None:
        bootstrap_raw_image(engine)
    return str(build_base_image(engine, "cpu", ca_bundle=default_ca_bundle()))


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@asynccontextmanager
async def started_sandbox(image: str, **spec: Any) -> AsyncIterator[Any]:
    from rebench.sandbox.docker import DockerSandbox

    fields = {
        "attempt_id": next(_attempt_ids),
        "environment": "test",
        "profile": "tiny",
        "image": image,
        "cpus": 1.0,
        "memory_gb": 1.0,
        **spec,
    }
    sandbox = DockerSandbox(SandboxSpec(**fields))
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.stop()


def with_sandbox(image: str, body: Callable[[Any], Awaitable[T]], **spec: Any) -> T:
    async def go() -> T:
        async with started_sandbox(image, **spec) as sandbox:
            return await body(sandbox)

    return asyncio.run(go())


@asynccontextmanager
async def attempt_sandbox(name: str, profile: str) -> AsyncIterator[tuple[Any, Any, Any]]:
    """(sandbox, gateway, environment) of environment `name`'s built Docker image, set up as an attempt's is
    (rebench.calibration.scoring_sandbox: start, install, gateway) but with no attempt around it:
    an attempt would first score the starting solution, and after its submission the held-out
    final, which tell a test of what the agent sees, or of one score call, nothing."""
    from rebench.calibration import scoring_sandbox
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry(Path(__file__).resolve().parents[1] / "environments").get(name)
    async with scoring_sandbox(env, profile, "docker") as (sandbox, gateway):
        yield sandbox, gateway, env


def scored_as_an_attempt(name: str, profile: str, files: dict[str, str]) -> Any:
    """One score call as an attempt makes it (rebench.scoring.run.run_scoring) in an
    `attempt_sandbox`, with `files` (paths relative to the solution folder) written first with the
    agent's own rights. Returns the ScoreResult."""
    from rebench.scoring.run import run_scoring

    async def go() -> Any:
        async with attempt_sandbox(name, profile) as (sandbox, gateway, env):
            for path, content in files.items():
                await sandbox.agent_write_file(f"{sandbox.paths.solution}/{path}", content.encode())
            return await run_scoring(sandbox, env.profile(profile).score_timeout_s, gateway)

    return asyncio.run(go())
