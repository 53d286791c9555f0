"""`rebench images bootstrap`: a Debian base image without any container registry.

Air-gapped clusters and this project's CI can reach Debian's package mirror (or
a local copy of it) but no registry, so the root filesystem is made with
debootstrap and turned into an image with `docker import`. It already holds
what the rebench base Dockerfile would otherwise install (python3, venv, sshd,
CA certificates), so building the base from it needs no network at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from rebench.errors import RebenchError
from rebench.images.naming import LABEL_KIND, RAW_REPOSITORY, RAW_TAG, raw_image
from rebench.paths import cache_dir
from rebench.sandbox.docker import DockerEngine

Log = Callable[[str], None]

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "openssh-server", "ca-certificates", "procps")
_TRIM = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
)


def _quiet(_: str) -> None:
    pass


def bootstrap_raw_image(
    engine: DockerEngine,
    *,
    mirror: str = DEFAULT_MIRROR,
    suite: str = DEFAULT_SUITE,
    force: bool = False,
    log: Log = _quiet,
) -> str:
    """Make `rebench/debian:bookworm-minbase` unless it exists; returns the image name."""
    name = raw_image()
    if not force and engine.image_id(name) is not None:
        log(f"{name} is already present")
        return name
    if shutil.which("debootstrap") is None:
        raise RebenchError("debootstrap is not installed; install it with: apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise RebenchError(
            "rebench images bootstrap must run as root (debootstrap creates device nodes and owners)"
        )
    work_root = cache_dir() / "bootstrap"
    work_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work_root, prefix="rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        log(f"debootstrap {suite} (minbase + {', '.join(PACKAGES)}) from {mirror}")
        result = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                suite,
                str(rootfs),
                mirror,
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            tail = " | ".join((result.stdout + result.stderr).strip().splitlines()[-4:])
            raise RebenchError(f"debootstrap failed (exit {result.returncode}): {tail}")
        for part in _TRIM:
            target = rootfs / part
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        tarball = Path(scratch) / "rootfs.tar"
        log("packing the root filesystem")
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."], check=True)
        log(f"docker import as {name}")
        engine.import_rootfs(
            tarball,
            RAW_REPOSITORY,
            RAW_TAG,
            changes=[
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "ENV LANG=C.UTF-8",
                'CMD ["/bin/bash"]',
                f"LABEL {LABEL_KIND}=raw",
            ],
        )
    return name
