"""The FLOP target and experiment cap have one source, each profile's params: the profile
description, the instructions and the README must not state other figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rebench.environments.metadata import load_metadata
from rebench.environments.registry import EnvironmentRegistry
from rebench.sandbox.base import SandboxPaths

ENV = Path(__file__).resolve().parents[1]
FLOP_FIGURE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[+-]?\d+(?![\w.])")
PROFILES = sorted(load_metadata(ENV / "environment.toml").profiles)


def figures(text: str) -> set[float]:
    return {float(match) for match in FLOP_FIGURE.findall(text)}


def readme_bullet(profile: str) -> str:
    """The README's `- `profile`: ...` bullet under "Profiles", continuation lines included."""
    lines = (ENV / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"- `{profile}`:"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return "\n".join(lines[start:end])


@pytest.mark.parametrize("profile", PROFILES)
def test_every_flop_figure_is_the_profiles_target_or_cap(profile: str) -> None:
    env = EnvironmentRegistry(ENV.parent).get("small_scaling_law")
    params = env.profile(profile).params
    target, cap = float(params["target_flops"]), float(params["experiment_flops_cap"])
    assert figures(env.profile(profile).description) <= {target, cap}
    assert figures(readme_bullet(profile)) == {target, cap}
    paths = SandboxPaths()
    text = env.instructions(profile, paths)
    assert f"**{params['target_flops']} FLOPs**" in text and f"**{params['experiment_flops_cap']} FLOPs**" in text
    assert figures(text) == {target, cap}
