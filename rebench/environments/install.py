"""Laying an environment into a fresh sandbox, the same way for every backend.

Order matters: the agent-writable workspace first, then read-only files, then
the protected folder, then the scoring parameters the helper reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from rebench.environments.registry import Environment
from rebench.sandbox.base import Sandbox

PARAMS_FILE = "params.json"


def scoring_context(sandbox: Sandbox, env: Environment, profile: str) -> dict[str, object]:
    """What `score(ctx)` receives: the profile's params plus the sandbox's paths."""
    return {
        **env.score_params(profile),
        "home": sandbox.paths.home,
        "solution": sandbox.paths.solution,
        "protected": sandbox.paths.protected,
    }


async def install_environment(sandbox: Sandbox, env: Environment, profile: str, assets: Path | None) -> None:
    paths = sandbox.paths
    if env.workspace_dir:
        await sandbox.copy_in(str(env.workspace_dir), paths.solution, user="agent")
    if assets and (assets / "workspace").is_dir():
        await sandbox.copy_in(str(assets / "workspace"), paths.solution, user="agent")
    if env.home_dir:
        await sandbox.copy_in(str(env.home_dir), paths.home, user="root", read_only=True)
    if assets and (assets / "home").is_dir():
        await sandbox.copy_in(str(assets / "home"), paths.home, user="root", read_only=True)
    await sandbox.copy_in(str(env.scoring_dir), paths.home, user="root", read_only=True)
    if env.protected_dir:
        await sandbox.copy_in(str(env.protected_dir), paths.protected, user="root")
    if assets and (assets / "protected").is_dir():
        await sandbox.copy_in(str(assets / "protected"), paths.protected, user="root")
    params = json.dumps(scoring_context(sandbox, env, profile), indent=2).encode()
    await sandbox.write_file(paths.in_protected(PARAMS_FILE), params, user="root", mode=0o640)
