"""Bounded copies of an attempt's solution folder to the host (its snapshots).

The folder is written by an untrusted agent, so a snapshot:

- copies at most the profile's cap, counted over all of an attempt's snapshots
  (`SnapshotBudget`): bytes of regular files, and entries (files, folders, links);
- stops reading at the cap: on Docker the archive stream from the container is cut off
  there, not read to its end and then trimmed;
- never creates a special file (FIFO, device, socket) on the host;
- never copies anything from outside the folder: symbolic links are kept only when
  relative and leading to a place inside it, hard links only to files also inside it;
- reports what it left out and why (`SnapshotReport`), for the attempt's record.

Entries are taken in name order. One that does not fit in what is left of the cap is left
out and the copy goes on with the next, except that on Docker skipping a large file means
reading past it, which is allowed only while the bytes read stay within the cap; past that,
and once the entry cap is reached, the copy stops and the rest is left out.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from pydantic import BaseModel, Field

CHUNK = 1 << 20
LISTED_LEFT_OUT = 50
"""How many left-out entries a report names; the rest are only counted."""

OVER_BYTES = "over the snapshot byte cap"
OVER_FILES = "over the snapshot entry cap"
SPECIAL = "special file ({kind}) skipped"
LINK_OUTSIDE = "link leading outside the solution folder"
HARDLINK_OUTSIDE = "hard link to a file outside the solution folder"
HARDLINK_LEFT_OUT = "hard link to a file that was left out"
UNSUPPORTED = "unsupported entry type skipped"
UNSAFE_NAME = "unsafe name skipped"
NOT_A_FOLDER = "parent is not a folder of the snapshot"


class SnapshotBudget:
    """What an attempt may still copy to the host; one per attempt, shared by its snapshots."""

    def __init__(self, max_bytes: int, max_files: int) -> None:
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.used_bytes = 0
        self.used_files = 0

    @property
    def bytes_left(self) -> int:
        return max(0, self.max_bytes - self.used_bytes)

    @property
    def files_left(self) -> int:
        return max(0, self.max_files - self.used_files)

    def fits(self, size: int) -> str | None:
        """None when one more entry of `size` bytes fits, else why not."""
        if self.files_left < 1:
            return OVER_FILES
        if size > self.bytes_left:
            return OVER_BYTES
        return None

    def take(self, size: int) -> None:
        self.used_files += 1
        self.used_bytes += size


DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_MAX_FILES = 100_000


def default_budget() -> SnapshotBudget:
    """The `tiny` default cap, for a copy made without an attempt's budget."""
    return SnapshotBudget(DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES)


class LeftOut(BaseModel):
    path: str
    reason: str
    size: int | None = None


class SnapshotReport(BaseModel):
    """What one snapshot copied and what it left out."""

    files: int = 0
    bytes: int = 0
    cap_bytes: int
    cap_files: int
    read_bytes: int = 0
    """Bytes read from the source archive (Docker); 0 when the copy read files directly."""
    capped: bool = False
    """Something was left out for the cap."""
    stopped_at: str | None = None
    """The entry at which the copy stopped at the cap; nothing after it was copied."""
    after_stop: int | None = None
    """Entries after `stopped_at`, when counted (local); None when they were never read (Docker)."""
    left_out: list[LeftOut] = Field(default_factory=list)
    left_out_count: int = 0
    """Entries left out before any stop (the listed ones, and more past the listing)."""

    def leave_out(self, path: str, reason: str, size: int | None = None) -> None:
        self.left_out_count += 1
        self.capped = self.capped or reason in (OVER_BYTES, OVER_FILES)
        if len(self.left_out) < LISTED_LEFT_OUT:
            self.left_out.append(LeftOut(path=path, reason=reason, size=size))

    def stop(self, path: str) -> None:
        self.capped = True
        self.stopped_at = path

    def note(self) -> str | None:
        """One line for the attempt's record; None when nothing was left out."""
        if not self.left_out_count and not self.capped:
            return None
        parts = [f"copied {self.files} entries ({_size(self.bytes)})"]
        if self.capped:
            parts[0] = f"snapshot capped at {_size(self.cap_bytes)} / {self.cap_files} entries: " + parts[0]
        else:
            parts[0] = "snapshot " + parts[0]
        if self.stopped_at is not None:
            rest = ("the rest of the folder was not read" if self.after_stop is None
                    else f"{self.after_stop} more entries not copied")
            parts.append(f"stopped at {self.stopped_at}, {rest}")
        if self.left_out_count:
            listed = sorted(self.left_out, key=lambda item: item.reason not in (OVER_BYTES, OVER_FILES))[:5]
            named = ", ".join(f"{item.path} ({item.reason})" for item in listed)
            more = self.left_out_count - len(listed)
            parts.append(f"left out {self.left_out_count}: {named}" + (f" and {more} more" if more > 0 else ""))
        return "; ".join(parts)


def _size(count: int) -> str:
    """Exact binary units when the size is a multiple of one, else one decimal in SI units."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def link_inside(link_dir: PurePosixPath, target: str) -> bool:
    """Whether a symbolic link in `link_dir` (relative to the snapshot root) pointing at
    `target` stays inside the root, judged on the names alone (nothing is resolved)."""
    if not target or target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(str(link_dir), target))
    return joined != ".." and not joined.startswith("../")


def safe_relative(name: str) -> PurePosixPath | None:
    path = PurePosixPath(name)
    if path.is_absolute() or any(part in ("..", "") for part in path.parts) or not path.parts:
        return None
    return path


class SnapshotWriter:
    """Creates entries under a fresh destination: regular files, folders and links, never
    through a link (links are made last, after every file and folder)."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.links: list[tuple[PurePosixPath, str]] = []
        dest.mkdir(parents=True, exist_ok=True)

    def _parent_ok(self, rel: PurePosixPath) -> bool:
        parent = self.dest
        for part in rel.parts[:-1]:
            parent = parent / part
            try:
                mode = os.lstat(parent).st_mode
            except FileNotFoundError:
                os.mkdir(parent, 0o755)
                continue
            if not stat.S_ISDIR(mode):
                return False
        return True

    def folder(self, rel: PurePosixPath) -> bool:
        if not self._parent_ok(rel):
            return False
        target = self.dest / rel
        try:
            os.mkdir(target, 0o755)
        except FileExistsError:
            return stat.S_ISDIR(os.lstat(target).st_mode)
        return True

    def file(self, rel: PurePosixPath, source: IO[bytes], size: int, mode: int, mtime: float) -> bool:
        """Write exactly `size` bytes (fewer if the source ends first), with only the
        owner's execute bit kept from `mode`."""
        if not self._parent_ok(rel):
            return False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            fd = os.open(self.dest / rel, flags, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as out:
            left = size
            while left > 0:
                chunk = source.read(min(CHUNK, left))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
            os.fchmod(out.fileno(), 0o755 if mode & 0o111 else 0o644)
        os.utime(self.dest / rel, (mtime, mtime), follow_symlinks=False)
        return True

    def hardlink(self, rel: PurePosixPath, existing: PurePosixPath) -> bool:
        if not self._parent_ok(rel):
            return False
        try:
            os.link(self.dest / existing, self.dest / rel, follow_symlinks=False)
        except OSError:
            return False
        return True

    def symlink(self, rel: PurePosixPath, target: str) -> bool:
        self.links.append((rel, target))
        return True

    def finish(self, report: SnapshotReport) -> None:
        """Make the links, then remove any that resolves outside through other links
        (`a -> .` with `b -> a/..`): the names alone said inside, the result says otherwise."""
        made: list[PurePosixPath] = []
        for rel, target in self.links:
            if self._parent_ok(rel):
                with contextlib.suppress(OSError):
                    os.symlink(target, self.dest / rel)
                    made.append(rel)
        root = os.path.realpath(self.dest)
        for rel in made:
            resolved = os.path.realpath(self.dest / rel)
            if resolved != root and not resolved.startswith(root + os.sep):
                os.unlink(self.dest / rel)
                report.leave_out(str(rel), LINK_OUTSIDE)


def admit(made: bool, name: str, why: str | None, budget: SnapshotBudget, report: SnapshotReport) -> bool:
    """Count an entry without data that was made, or record why not; False at the entry cap."""
    if why is not None:
        report.leave_out(name, why)
        return why != OVER_FILES
    if made:
        budget.take(0)
        report.files += 1
    else:
        report.leave_out(name, NOT_A_FOLDER)
    return True


# -- local: a folder on the host --------------------------------------------------------
SKIPPED_NAMES = {"__pycache__"}


def _walk(root: Path) -> Iterator[tuple[PurePosixPath, os.stat_result]]:
    """Every entry under `root` depth first in name order, as Docker's archive lists them
    (a folder, then its contents, then its next sibling); links are not followed."""
    stack: list[Iterator[PurePosixPath]] = [_children(root, PurePosixPath())]
    while stack:
        rel = next(stack[-1], None)
        if rel is None:
            stack.pop()
            continue
        try:
            info = os.lstat(root / rel)
        except OSError:
            continue
        yield rel, info
        if stat.S_ISDIR(info.st_mode):
            stack.append(_children(root, rel))


def _children(root: Path, folder: PurePosixPath) -> Iterator[PurePosixPath]:
    try:
        names = sorted(os.listdir(root / folder))
    except OSError:
        names = []
    return iter([folder / name for name in names if name not in SKIPPED_NAMES])


def copy_folder(source: Path, dest: Path, budget: SnapshotBudget) -> SnapshotReport:
    """Copy a host folder into `dest` within `budget`, by the same rules as the Docker copy.

    Only hard links whose every link is inside the folder are copied (as hard links to the
    first copy); once a cap stops the copy, the remaining entries are only counted."""
    report = SnapshotReport(cap_bytes=budget.max_bytes, cap_files=budget.max_files)
    links_inside: dict[tuple[int, int], int] = {}
    for _rel, info in _walk(source):
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            key = (info.st_dev, info.st_ino)
            links_inside[key] = links_inside.get(key, 0) + 1
    writer = SnapshotWriter(dest)
    first_copy: dict[tuple[int, int], PurePosixPath] = {}
    for rel, info in _walk(source):
        if report.after_stop is not None:
            report.after_stop += 1
        elif not _copy_entry(source, rel, info, writer, budget, report, links_inside, first_copy):
            report.stop(str(rel))
            report.after_stop = 0
    writer.finish(report)
    return report


def _copy_entry(source: Path, rel: PurePosixPath, info: os.stat_result, writer: SnapshotWriter, budget: SnapshotBudget,
                report: SnapshotReport, links_inside: dict[tuple[int, int], int],
                first_copy: dict[tuple[int, int], PurePosixPath]) -> bool:
    """Copy one entry of a host folder, or record why not; False when the copy must stop here."""
    name, mode = str(rel), info.st_mode
    why = budget.fits(info.st_size if stat.S_ISREG(mode) else 0)
    key = (info.st_dev, info.st_ino)
    if stat.S_ISREG(mode) and info.st_nlink > 1 and links_inside.get(key, 0) < info.st_nlink:
        report.leave_out(name, HARDLINK_OUTSIDE, info.st_size)
    elif stat.S_ISREG(mode) and key in first_copy:
        return admit(why is None and writer.hardlink(rel, first_copy[key]), name, why, budget, report)
    elif stat.S_ISREG(mode):
        if why is not None:
            report.leave_out(name, why, info.st_size)
            return why != OVER_FILES
        if not _copy_regular(source / rel, info, rel, writer):
            report.leave_out(name, NOT_A_FOLDER, info.st_size)
            return True
        budget.take(info.st_size)
        report.files += 1
        report.bytes += info.st_size
        first_copy[key] = rel
    elif stat.S_ISDIR(mode):
        return admit(why is None and writer.folder(rel), name, why, budget, report)
    elif stat.S_ISLNK(mode):
        target = os.readlink(source / rel)
        if link_inside(rel.parent, target):
            return admit(why is None and writer.symlink(rel, target), name, why, budget, report)
        report.leave_out(name, LINK_OUTSIDE)
    else:
        report.leave_out(name, SPECIAL.format(kind=_special_kind(mode)))
    return True


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


def _copy_regular(path: Path, info: os.stat_result, rel: PurePosixPath, writer: SnapshotWriter) -> bool:
    """Copy at most the size seen when the entry was admitted, from the very file that was seen."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(handle.fileno())
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            return False
        return writer.file(rel, handle, info.st_size, info.st_mode, info.st_mtime)
