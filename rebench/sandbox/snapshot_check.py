"""Whether a snapshot folder on the host may be laid into a sandbox again (re-scoring).

A snapshot copy (rebench.sandbox.snapshot) only ever makes folders, regular files without
setuid/setgid bits, links that stay inside it and hard links between its own files, within the
profile's cap. A folder found later holding anything else was not made that way (on the local
backend the agent runs as the harness's user and can reach it), and restoring it would read the
host through it: a link or a hard link to a file of the user's or the store, a FIFO or a device
that never ends, a sparse file of 100 GB copied whole. So it is checked first, without following
anything and without opening a file, and refused with the first offending entry.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from rebench.sandbox.snapshot import HARDLINK_OUTSIDE, LINK_OUTSIDE, SPECIAL, link_inside

ALLOWED = "a snapshot holds only folders, files and links that stay inside it"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


class _Walk:
    """Counts and the first problem, over one depth-first walk (links are never followed)."""

    def __init__(self, root: Path, max_bytes: int | None, max_files: int | None) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.max_bytes, self.max_files = max_bytes, max_files
        self.bytes = self.entries = 0
        self.links: dict[tuple[int, int], tuple[int, int, str]] = {}
        """(device, inode) -> (names inside, link count, first name) of files with more than one name."""

    def entry(self, rel: PurePosixPath, info: os.stat_result) -> str | None:
        mode, name = info.st_mode, str(rel)
        self.entries += 1
        if self.max_files is not None and self.entries > self.max_files:
            return f"{name}: more than the profile's snapshot cap of {self.max_files} entries"
        if stat.S_ISLNK(mode):
            return self._link(rel)
        if stat.S_ISDIR(mode):
            return None
        if not stat.S_ISREG(mode):
            return f"{name}: {SPECIAL.format(kind=_kind(mode))}; {ALLOWED}"
        if mode & (stat.S_ISUID | stat.S_ISGID):
            return f"{name}: a setuid or setgid file; {ALLOWED}"
        key = (info.st_dev, info.st_ino)
        if info.st_nlink > 1:
            inside, count, first = self.links.get(key, (0, info.st_nlink, name))
            self.links[key] = (inside + 1, count, first)
            if inside:
                return None  # its bytes are counted once, as the copy counts them
        self.bytes += info.st_size
        if self.max_bytes is not None and self.bytes > self.max_bytes:
            return f"{name}: over the profile's snapshot cap of {self.max_bytes} bytes ({info.st_size} bytes)"
        return None

    def _link(self, rel: PurePosixPath) -> str | None:
        path = self.root / rel
        target = os.readlink(path)
        resolved = os.path.realpath(path)
        inside = resolved == self.real_root or resolved.startswith(self.real_root + os.sep)
        if not link_inside(rel.parent, target) or not inside:
            return f"{rel}: {LINK_OUTSIDE} (-> {target}); {ALLOWED}"
        return None

    def hard_links(self) -> str | None:
        for inside, count, first in self.links.values():
            if inside < count:
                return f"{first}: {HARDLINK_OUTSIDE}; {ALLOWED}"
        return None


def check_folder(root: Path, max_bytes: int | None = None, max_files: int | None = None) -> str | None:
    """Why the host folder `root` may not be restored as a snapshot (one line naming the entry), or
    None. `max_bytes`, `max_files`: the profile's snapshot cap; None checks the kinds of entry only."""
    try:
        info = os.lstat(root)
    except OSError as exc:
        return f"{root}: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        kind = "a link" if stat.S_ISLNK(info.st_mode) else "not a folder"
        return f"{root}: {kind}; {ALLOWED}"
    walk = _Walk(root, max_bytes, max_files)
    stack = [PurePosixPath()]
    while stack:
        folder = stack.pop()
        try:
            names = sorted(os.listdir(root / folder))
        except OSError as exc:
            return f"{folder}: cannot be read ({exc.strerror or exc})"
        folders: list[PurePosixPath] = []
        for name in names:
            rel = folder / name
            try:
                info = os.lstat(root / rel)
            except OSError as exc:
                return f"{rel}: cannot be read ({exc.strerror or exc})"
            why = walk.entry(rel, info)
            if why is not None:
                return why
            if stat.S_ISDIR(info.st_mode):
                folders.append(rel)
        stack.extend(reversed(folders))
    return walk.hard_links()
