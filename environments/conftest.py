"""Shared fixtures for the environments' own tests: an environment installed in a real local
sandbox by the harness's own functions (asset build, install_environment, run_scoring), so
these tests score exactly the way an attempt does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from rebench.environments.build import assets_dir
from rebench.environments.install import FINAL_PARAMS_FILE, PARAMS_FILE, install_environment
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

    def score(self, params: str = PARAMS_FILE) -> dict[str, Any]:
        """One score call through the harness (run_scoring and the in-sandbox helper), with the
        protected params file `params` (the held-out final's: FINAL_PARAMS_FILE)."""
        timeout = self.env.profile(self.profile).score_timeout_s
        return asyncio.run(run_scoring(self.sandbox, timeout, params=params)).model_dump()

    def check_final_split(self, intermediate_data: str, unknown_split: str, max_se: float) -> dict[str, Any]:
        """The checks every text-scored profile's `final_split` passes (docs/heldout.md), with the
        starting solution in place: the scorer reads `intermediate_data` for score calls and final.bin
        for the held-out final, scoring each at its own split's start anchor with a sampling error
        in (0, max_se); a split of another name, or a final split whose file is missing, is an
        invalid score, never the visible data a scorer falls back to when run by hand. Returns the
        final split's score (final.bin is gone afterwards)."""
        profile = self.env.profile(self.profile)
        split = profile.final_split
        assert split is not None and split.params == {"split": "final"}
        intermediate, final = self.score(PARAMS_FILE), self.score(FINAL_PARAMS_FILE)
        assert intermediate["details"]["data"] == intermediate_data, intermediate
        assert intermediate["details"]["split"] == "intermediate", intermediate
        assert final["details"]["data"] == "final.bin" and final["details"]["split"] == "final", final
        assert intermediate["raw"] is not None and final["raw"] is not None and intermediate["raw"] != final["raw"]
        # each at its split's start anchor, normalized with that split's anchors (a build's trained
        # weights depend a little on the machine's floating-point kernels, so not to the last digit)
        assert abs(normalize(intermediate["raw"], profile.anchors.start, profile.anchors.reference, clip=False)) < 0.01
        assert abs(normalize(final["raw"], split.anchors.start, split.anchors.reference, clip=False)) < 0.01
        assert 0 < final["details"]["raw_se"] < max_se  # the sampling error the README's margin is made of

        params = json.loads((self.protected / PARAMS_FILE).read_text())
        (self.protected / "params-other.json").write_text(json.dumps({**params, "split": unknown_split}))
        other = self.score("params-other.json")
        assert other["raw"] is None and f"unknown split {unknown_split!r}" in other["message"]["error"], other

        (self.protected / "final.bin").unlink()
        missing = self.score(FINAL_PARAMS_FILE)
        assert missing["raw"] is None and "final.bin is missing or not readable" in missing["message"]["error"], missing
        return final

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
