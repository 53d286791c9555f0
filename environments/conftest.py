"""Shared fixtures for the environments' own tests: an environment installed in a real local
sandbox by the harness's own functions (asset build, install_environment, run_scoring), so
these tests score exactly the way an attempt does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from rebench.environments.build import assets_dir
from rebench.environments.install import install_environment
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.sandbox.base import ExecResult, Sandbox, SandboxSpec
from rebench.sandboxes import create_sandbox
from rebench.scoring.normalize import normalize
from rebench.scoring.run import run_scoring

ENVIRONMENTS = Path(__file__).resolve().parent


class InstalledEnvironment:
    """One environment and profile, installed in a fresh local sandbox."""

    def __init__(self, env: Environment, profile: str, sandbox: Sandbox) -> None:
        self.env, self.profile, self.sandbox = env, profile, sandbox
        self.home = Path(sandbox.paths.home)
        self.solution = Path(sandbox.paths.solution)
        self.protected = Path(sandbox.paths.protected)

    def score(self) -> dict[str, Any]:
        """One score call through the harness (run_scoring and the in-sandbox helper)."""
        timeout = self.env.profile(self.profile).score_timeout_s
        return asyncio.run(run_scoring(self.sandbox, timeout)).model_dump()

    def run(self, command: str, timeout: float = 600) -> ExecResult:
        """A command as the agent, in its solution folder."""
        return asyncio.run(self.sandbox.exec(command, user="agent", timeout=timeout))

    def normalized(self, raw: float | None) -> float:
        anchors = self.env.profile(self.profile).anchors
        return normalize(raw, anchors.start, anchors.reference, clip=False)


class Install(Protocol):
    def __call__(self, name: str, profile: str = "tiny") -> InstalledEnvironment: ...


def environment(name: str) -> Environment:
    return EnvironmentRegistry(ENVIRONMENTS).get(name)


@pytest.fixture
def installed() -> Iterator[Install]:
    """installed(name, profile="tiny"): the environment's assets built (cached by content hash,
    shared with `rebench run`) and installed in a new local sandbox, stopped after the test."""
    sandboxes: list[Sandbox] = []

    def install(name: str, profile: str = "tiny") -> InstalledEnvironment:
        env = environment(name)
        assets = assets_dir(env, profile)
        resources = env.profile(profile).resources
        spec = SandboxSpec(attempt_id=0, environment=name, profile=profile, cpus=resources.cpus,
                           memory_gb=resources.memory_gb)
        sandbox = create_sandbox("local", spec, env)
        sandboxes.append(sandbox)
        asyncio.run(sandbox.start())
        asyncio.run(install_environment(sandbox, env, profile, assets))
        return InstalledEnvironment(env, profile, sandbox)

    yield install
    for sandbox in sandboxes:
        asyncio.run(sandbox.stop())
