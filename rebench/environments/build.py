"""Preparing an environment on this machine: its virtualenv and its generated assets.

Both are cached under the rebench cache folder, keyed by content hashes, so an
unchanged environment is never rebuilt and a changed one never reuses stale files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from filelock import FileLock

from rebench.environments import assets as operator_assets
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.harness_files import harness_folder
from rebench.paths import cache_dir

Log = Callable[[str], None]


BUILD_PARAMS_ENV = "REBENCH_BUILD_PARAMS"
"""Names the params file of a build; rebench.kit.buildutil.profile_params reads it (the name is
written twice: the kit cannot import the harness)."""


def _quiet(_: str) -> None:
    pass


def venv_dir(env: Environment, profile: str) -> Path:
    """Keyed by the profile's requirements (requirements-<profile>.txt or requirements.txt), so
    profiles with the same requirements share one virtualenv and a changed file gets a new one."""
    path = env.requirements(profile)
    requirements = path.read_bytes() if path else b""
    digest = hashlib.sha256(requirements + sys.version.encode() + sys.prefix.encode()).hexdigest()[:12]
    return cache_dir() / "venvs" / f"{env.name}-{digest}"


def local_python(env: Environment, profile: str, *, log: Log = _quiet, build: bool = True) -> Path:
    """The environment's virtualenv python, creating it when missing.

    The venv sees the harness's site-packages (the system's, and the harness's own
    virtualenv's when it runs in one): an environment pinned to the same torch as the
    harness then costs seconds to set up instead of a GB-sized install, while anything
    missing or pinned differently is installed into the venv, which comes first on its path.
    """
    folder = venv_dir(env, profile)
    python = folder / "bin" / "python"
    if (folder / ".complete").exists():
        return python
    if not build:
        raise RebenchError(f"environment {env.name!r} is not built for profile {profile!r}; "
                           f"run: rebench envs build {env.name} --profile {profile}")
    with build_lock(folder):
        if (folder / ".complete").exists():  # another process built it while this one waited
            return python
        _create_venv(env, profile, folder, log)
    return python


def build_lock(target: Path) -> FileLock:
    """One builder per content-hashed target across processes: a second `rebench` building the
    same environment waits, then finds the first one's finished folder and reuses it."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    return FileLock(str(locks / f"{target.parent.name}-{target.name}.lock"))


def _create_venv(env: Environment, profile: str, folder: Path, log: Log) -> None:
    python = folder / "bin" / "python"
    log(f"creating virtualenv for {env.name} in {folder}")
    if folder.exists():
        shutil.rmtree(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    # No pip inside the venv (ensurepip costs many seconds): the harness's pip installs into it.
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(folder)],
         f"virtualenv for {env.name}")
    _see_harness_packages(python)
    requirements = env.requirements(profile)
    if requirements and _installed_already(python, requirements):
        log(f"every requirement of {requirements} is installed already")
    elif requirements:
        log(f"installing {requirements}")
        _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
              "--disable-pip-version-check", "-r", str(requirements)], f"requirements of {env.name}")
    (folder / ".complete").touch()


def _installed_already(python: Path, requirements: Path) -> bool:
    """Whether the venv's python finds every requirement (and their dependencies) installed at an
    allowed version, so pip would install nothing: checked in ~0.1 CPU-s instead of pip's ~3."""
    check = Path(__file__).with_name("requirements_check.py")
    done = subprocess.run([str(python), str(check), str(requirements)], capture_output=True, timeout=120)
    return done.returncode == 0


def _see_harness_packages(python: Path) -> None:
    """`--system-site-packages` reaches only the base interpreter's packages; when the harness
    itself runs in a virtualenv, a .pth file adds that virtualenv's site-packages after the new venv's."""
    if sys.prefix == sys.base_prefix:
        return
    harness = [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    found = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    lines = list(dict.fromkeys(harness))
    (Path(found) / "_rebench_harness.pth").write_text("".join(f"{line}\n" for line in lines))


def built_assets(env: Environment, profile: str) -> Path | None:
    """The finished build folder of this profile, or None when it still has to be built."""
    if env.build_script is None:
        return None
    target = _assets_target(env, profile)
    return target if (target / ".complete").exists() else None


def _assets_target(env: Environment, profile: str) -> Path:
    return cache_dir() / "assets" / env.name / f"{profile}-{env.content_hash(profile)}"


def assets_dir(env: Environment, profile: str, *, log: Log = _quiet, build: bool = True,
               assets: Mapping[str, Path] | None = None) -> Path | None:
    """Generated assets for one profile (DIR/home, DIR/workspace, DIR/protected), or None
    when the environment has no build.py. A profile that declares operator assets gets them
    checked first (see rebench.environments.assets), from `assets` or the settings file, and
    build.py reads them through `--assets`; nothing is built while one is missing or wrong."""
    script = env.build_script
    if script is None:
        return None
    env.profile(profile)
    target = _assets_target(env, profile)
    if (target / ".complete").exists():
        return target
    if not build:
        raise RebenchError(
            f"assets of {env.name!r} ({profile}) are not built; run: rebench envs build {env.name} --profile {profile}"
        )
    found = operator_assets.verify(env, profile, assets)
    python = local_python(env, profile, log=log)
    target.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(target):
        if (target / ".complete").exists():  # built by another process while this one waited
            return target
        _build_assets(env, profile, script, python, found, target, log)
    return target


def _build_assets(env: Environment, profile: str, script: Path, python: Path, found: Mapping[str, Path],
                  target: Path, log: Log) -> None:
    log(f"building {env.name} assets for profile {profile}")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
        out = Path(scratch) / "out"
        out.mkdir()
        argv = [str(python), str(script), "--profile", profile, "--out", str(out)]
        if found:
            inputs = Path(scratch) / "inputs"  # links to the operator's files, outside `out`
            operator_assets.stage(env, profile, found, inputs)
            argv += ["--assets", str(inputs)]
            _record_assets(env, profile, found, out)
        # The profile's params as this run has them (`--env-param` values included), for
        # rebench.kit.buildutil.profile_params; build.py run by hand reads environment.toml instead.
        params = Path(scratch) / "params.json"
        params.write_text(json.dumps({"profile": profile, "params": env.profile(profile).params}, default=str))
        # The build imports the environment kit from the same tree a sandbox's harness folder holds.
        _run(argv, f"build.py of {env.name} ({profile})", cwd=env.root,
             env={**os.environ, "PYTHONPATH": str(harness_folder()), BUILD_PARAMS_ENV: str(params)})
        (out / ".complete").touch()
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)


def _record_assets(env: Environment, profile: str, found: Mapping[str, Path], out: Path) -> None:
    """Which operator files a build was made from (their sha256, not their paths), beside it:
    for an unpinned asset this is the only record of what went in."""
    record = {name: operator_assets.sha256_of(path) for name, path in found.items()}
    (out / "operator-assets.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _run(argv: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise RebenchError(f"building {what} failed (exit {result.returncode}): {' | '.join(tail)}")
