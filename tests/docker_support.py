"""Shared pieces of the Docker tests: an engine (or a clean skip), the base image, and
a started sandbox. They skip only when no Docker engine answers; everything else
(a missing base image) is built, so CI with an engine always runs them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
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
