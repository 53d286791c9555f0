"""Wheelhouses for environment images: what an image installs without touching an index.

Most environments pin the same heavy packages (PyTorch's CPU build and NumPy). Installed in each
environment's own layer, every image carried its own copy: a 700 MB install per image build and
as much disk per image. Requirement lines listed in SHARED_REQUIREMENTS are therefore installed
in a layer of their own, before anything that differs between environments (env.Dockerfile), from
a wheelhouse of their own: every environment that pins them alike builds the same layer, which
the engine's build cache then reuses, and the images share it on disk. The environment's own
wheelhouse leaves out the wheels that layer already installed.
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from rebench.environments.build import build_lock
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.images.naming import digest
from rebench.paths import cache_dir

Log = Callable[[str], None]

SHARED_REQUIREMENTS = frozenset({"torch==2.13.0", "numpy"})
"""Requirement lines (as written, comments and spaces aside) that get the shared layer."""


def _quiet(_: str) -> None:
    pass


def requirements(env: Environment, profile: str) -> bytes:
    """The profile's requirements file (requirements-<profile>.txt, else requirements.txt); the
    image's tag covers it through the environment's content hash."""
    path = env.requirements(profile)
    return path.read_bytes() if path else b""


def shared_requirements(env: Environment, profile: str) -> bytes:
    """The profile's requirement lines that the shared layer installs, sorted (empty: none). The
    same lines in any environment give the same bytes, hence the same cached layer."""
    lines = {re.sub(r"\s+", "", line.split("#", 1)[0]) for line in requirements(env, profile).decode().splitlines()}
    shared = sorted(lines & SHARED_REQUIREMENTS)
    return "".join(f"{line}\n" for line in shared).encode()


def fill_wheelhouse(env: Environment, profile: str, log: Log = _quiet) -> Path:
    """Download the profile's requirements as wheels with this host's pip; cached by their hash."""
    wanted = requirements(env, profile)
    return _filled(cache_dir() / "wheels" / f"{env.name}-{digest(wanted)}", wanted, env.name, log,
                   env.requirements(profile))


def fill_shared_wheelhouse(env: Environment, profile: str, log: Log = _quiet) -> Path:
    """The wheels of the profile's shared requirements (SHARED_REQUIREMENTS), one folder per set."""
    wanted = shared_requirements(env, profile)
    return _filled(cache_dir() / "wheels" / f"shared-{digest(wanted)}", wanted, "the shared layer", log)


def _filled(target: Path, wanted: bytes, what: str, log: Log, listed: Path | None = None) -> Path:
    """`target`, filled with the wheels of `wanted` (read from `listed` when given: relative lines
    in a requirements file resolve beside it)."""
    if (target / ".complete").exists():
        return target
    with build_lock(target):  # a second build waits and reuses the wheels
        if not (target / ".complete").exists():
            target.mkdir(parents=True, exist_ok=True)
            if wanted.strip():
                log(f"downloading wheels for {what} into {target}")
                if listed is not None:
                    _download(listed, target, what)
                else:
                    with tempfile.TemporaryDirectory() as scratch:
                        (Path(scratch) / "requirements.txt").write_bytes(wanted)
                        _download(Path(scratch) / "requirements.txt", target, what)
            (target / ".complete").touch()
    return target


def _same_platform() -> bool:
    return (
        sys.platform == "linux"
        and platform.machine() == "x86_64"
        and sys.version_info[:2] == (3, 11)
        and sys.implementation.name == "cpython"
    )


def _download(listed: Path, target: Path, what: str) -> None:
    argv = [sys.executable, "-m", "pip", "download", "-q", "-d", str(target), "-r", str(listed)]
    if not _same_platform():
        argv += ["--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11"]
        for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"):
            argv += ["--platform", tag]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-3:])
        raise RebenchError(f"pip download for {what} failed: {tail}; pass --wheelhouse DIR with the wheels")
