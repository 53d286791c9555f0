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
FINAL_PARAMS_FILE = "params-final.json"
"""The scorer's params for the held-out final split (a profile's `final_split`), beside params.json."""
SCORING_DIR = "scoring"
SCORING_HOME = "home"
"""The scorer's copy of the build's home files, in the protected folder (ctx["scoring_home"])."""


def scoring_context(sandbox: Sandbox, env: Environment, profile: str) -> dict[str, object]:
    """What `score(ctx)` receives: the profile's params plus the sandbox's paths."""
    return {
        **env.score_params(profile),
        "home": sandbox.paths.home,
        "solution": sandbox.paths.solution,
        "protected": sandbox.paths.protected,
        "scoring_home": sandbox.paths.in_protected(SCORING_HOME),
    }


def home_files(folders: list[Path]) -> list[str]:
    """The relative paths of the files (and links) the build puts in the agent's home."""
    return sorted({str(path.relative_to(folder)) for folder in folders
                   for path in folder.rglob("*") if path.is_file() or path.is_symlink()})


async def link_scoring_home(sandbox: Sandbox, files: list[str]) -> None:
    """The home files again under the protected folder, where the agent cannot rename anything:
    hard links (root's read-only files: no second copy on disk), or copies where linking fails.
    The scorer reads these, never the agent's home, which the agent owns."""
    paths = sandbox.paths
    target = paths.in_protected(SCORING_HOME)
    script = ('set -e; mkdir -p "$1"; cd "$2"; shift 2; '
              'cp -al --parents -- "$@" "$0" 2>/dev/null || cp -a --parents -- "$@" "$0"')
    batches = [files[start:start + 500] for start in range(0, len(files), 500)]
    for batch in batches or [[]]:
        command = ["sh", "-c", script, target, target, paths.home, *batch] if batch else ["mkdir", "-p", target]
        result = await sandbox.exec(command, user="root", cwd="/", timeout=600)
        if not result.ok:
            raise RuntimeError(f"cannot link the home files for the scorer: {result.stderr.strip()[-500:]}")


async def install_environment(sandbox: Sandbox, env: Environment, profile: str, assets: Path | None) -> None:
    paths = sandbox.paths
    workspace = env.workspace_for(profile)
    if workspace:
        await sandbox.copy_in(str(workspace), paths.solution, user="agent")
    if assets and (assets / "workspace").is_dir():
        await sandbox.copy_in(str(assets / "workspace"), paths.solution, user="agent")
    if env.home_dir:
        await sandbox.copy_in(str(env.home_dir), paths.home, user="root", read_only=True)
    if assets and (assets / "home").is_dir():
        await sandbox.copy_in(str(assets / "home"), paths.home, user="root", read_only=True)
    await sandbox.copy_in(str(env.scoring_dir), paths.home, user="root", read_only=True)
    homes = [folder for folder in (env.home_dir, assets / "home" if assets else None) if folder and folder.is_dir()]
    await link_scoring_home(sandbox, home_files(homes))
    # The copy that runs lives where the agent cannot rename or replace it (it owns its home).
    await sandbox.copy_in(str(env.scoring_dir), paths.in_protected(SCORING_DIR), user="root", read_only=True)
    if env.protected_dir:
        await sandbox.copy_in(str(env.protected_dir), paths.protected, user="root")
    if assets and (assets / "protected").is_dir():
        await sandbox.copy_in(str(assets / "protected"), paths.protected, user="root")
    params = json.dumps(scoring_context(sandbox, env, profile), indent=2).encode()
    await sandbox.write_file(paths.in_protected(PARAMS_FILE), params, user="root", mode=0o640)
    split = env.profile(profile).final_split
    if split is not None:
        final = json.dumps({**scoring_context(sandbox, env, profile), **split.params}, indent=2).encode()
        await sandbox.write_file(paths.in_protected(FINAL_PARAMS_FILE), final, user="root", mode=0o640)
