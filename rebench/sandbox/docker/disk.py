"""The agent's own disk: a file system of fixed size and inode count, made for each attempt on
the host and mounted at the agent's home and /tmp, the places the agent can write.

overlay2 on ext4 cannot cap a container's writable layer, and a poll of its size comes too late:
`fallocate -l 60G` takes a millisecond, and a million empty files count as nothing in `SizeRw`.
A sparse ext4 image, loop-mounted by the harness (root on the engine's host, as the cgroup
freezer already needs), bounds both: the agent gets ENOSPC at the limit, the host's disk and
inode table keep the rest, and the image takes on the host only what was written. The folder is
named in the container's `rebench.disk` label, so `rebench gc` releases what a dead harness left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rebench.errors import SandboxStartError

LABEL_DISK = "rebench.disk"
PREFIX = "rbd-"
"""Name prefix of a disk's host folder (under REBENCH_DISK_DIR, else the system's temporary folder)."""
BYTES_PER_INODE = 16384
"""ext4's own default ratio: a 50 GB disk holds 3.2 million files."""
AGENT_UID = 1000
"""The base image's `agent` (rebench/images): its home's owner before the container starts."""
MOUNTS = {"home": "/home/agent", "tmp": "/tmp"}
"""Folder on the disk -> where the container sees it."""
_MKFS = ["mkfs.ext4", "-q", "-F", "-m", "0", "-i", str(BYTES_PER_INODE), "-O", "^has_journal",
         "-E", "lazy_itable_init=1,nodiscard,root_owner=0:0"]
_MOUNT_OPTIONS = "loop,noinit_itable,nosuid,nodev"
SCORING_TMP = "/var/lib/rebench-scoring"
"""The scorer's TMPDIR, on the container's own layer, not the agent's disk: a disk the agent filled
(bytes or inodes) does not fail the scoring of what it left. Root's, group `protected`, 1771:
the scorer makes its folders there, `subject` reaches its scratch inside, the agent lists nothing."""
SETUP = f"""
set -eu
cp -rn --preserve=mode /etc/skel/. /home/agent/ && chown -R agent:agent /home/agent
install -d -o root -g protected -m 1771 {SCORING_TMP}
"""
"""Run as root once the container runs: the image's home files (hidden by the mount) and the scorer's TMPDIR."""
FULL_BYTES = 1 << 20
SWEEP_AGE_S = 300.0
"""A disk folder this young may belong to a container still being created: gc leaves it."""


def disk_root() -> Path:
    return Path(os.environ.get("REBENCH_DISK_DIR") or tempfile.gettempdir())


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxStartError(f"the agent's disk could not be made: {argv[0]}: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SandboxStartError(f"the agent's disk could not be made: {' '.join(argv[:2])}: "
                                f"{said[-1] if said else f'exit {done.returncode}'} (the Docker backend "
                                "needs root on the engine's host and loop devices)")


class AgentDisk:
    """One attempt's disk: `folder/disk.img` mounted at `folder/mnt`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def mount_point(self) -> Path:
        return self.folder / "mnt"

    @classmethod
    def create(cls, size_bytes: int, attempt_id: int) -> AgentDisk:
        if size_bytes < 16 * 1024**2:
            raise SandboxStartError(f"disk limit {size_bytes} bytes is too small for the agent's disk "
                                    "(at least 16 MiB; REBENCH_DISK_LIMIT_GB)")
        root = disk_root()
        root.mkdir(parents=True, exist_ok=True)
        disk = cls(Path(tempfile.mkdtemp(prefix=f"{PREFIX}a{attempt_id}-", dir=root)))
        try:
            image = disk.folder / "disk.img"
            with image.open("wb") as handle:
                handle.truncate(size_bytes)
            _run([*_MKFS, str(image)])
            disk.mount_point.mkdir()
            _run(["mount", "-o", _MOUNT_OPTIONS, str(image), str(disk.mount_point)])
            shutil.rmtree(disk.mount_point / "lost+found", ignore_errors=True)
            home = disk.mount_point / "home"
            home.mkdir(mode=0o755)
            os.chown(home, AGENT_UID, AGENT_UID)
            tmp = disk.mount_point / "tmp"
            tmp.mkdir()
            os.chmod(tmp, 0o1777)
        except BaseException:
            disk.release()
            raise
        return disk

    def binds(self) -> dict[str, dict[str, str]]:
        return {str(self.mount_point / name): {"bind": inside, "mode": "rw"} for name, inside in MOUNTS.items()}

    def full(self) -> str | None:
        """What is used up, when the agent's disk is full (under 1 MiB or no inode left); else None."""
        try:
            found = os.statvfs(self.mount_point)
        except OSError:
            return None
        if found.f_bavail * found.f_frsize < FULL_BYTES:
            return f"its disk ({found.f_blocks * found.f_frsize / 1024**3:.2f} GB)"
        if found.f_favail == 0:
            return f"the {found.f_files} files of its disk"
        return None

    def release(self) -> None:
        """Unmount (lazily: a container being removed may still hold it; the loop device goes with
        the last user) and remove the folder. Safe to call twice, or on a folder half made."""
        release_folder(self.folder)


def release_folder(folder: Path) -> None:
    if not folder.name.startswith(PREFIX) or not folder.is_dir():
        return
    mount_point = folder / "mnt"
    if os.path.ismount(mount_point):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=60)
    if os.path.ismount(mount_point):
        return  # never remove files through a mount that is still there
    shutil.rmtree(folder, ignore_errors=True)


def sweep_disks(in_use: set[str]) -> list[str]:
    """Release every disk folder under the disk root that no container names (its harness died
    and the engine removed the container); returns the folders released."""
    root = disk_root()
    released = []
    with contextlib.suppress(OSError):
        for folder in root.iterdir():
            if (folder.name.startswith(PREFIX) and folder.is_dir() and str(folder) not in in_use
                    and time.time() - folder.stat().st_mtime > SWEEP_AGE_S):
                release_folder(folder)
                released.append(str(folder))
    return released
