"""Tar archives between the host and a container: the Docker Engine API moves files only
as tar streams. In: one file, or a folder's contents, with the owner and permission bits
the sandbox decides. Out: a snapshot extracted from the container's archive stream within
the attempt's budget, by the rules of `rebench.sandbox.snapshot`, reading no more of the
stream than the cap allows."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import IO

from rebench.errors import SandboxError
from rebench.sandbox.snapshot import (
    CHUNK,
    HARDLINK_LEFT_OUT,
    HARDLINK_OUTSIDE,
    LINK_OUTSIDE,
    NOT_A_FOLDER,
    OVER_FILES,
    SPECIAL,
    UNSAFE_NAME,
    UNSUPPORTED,
    SnapshotBudget,
    SnapshotReport,
    SnapshotWriter,
    admit,
    link_inside,
    safe_relative,
)

HEADER_ALLOWANCE = 1024
"""Archive bytes allowed per entry on top of its data (a tar header, long-name records, padding)."""
STREAM_SLACK = 1 << 20
"""Archive bytes allowed on top of the cap: the end-of-archive blocks and the reader's buffer."""


# -- in: files and folders to put into the container ------------------------------------
def tar_file(name: str, data: bytes, uid: int, gid: int, mode: int) -> bytes:
    """A one-file archive of `data` as `name`, owned by uid:gid with permission bits `mode`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.uid, info.gid, info.mode, info.mtime = uid, gid, mode, int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def tar_folder(source: Path, uid: int, gid: int, clear: int, handle: IO[bytes]) -> None:
    """Write `source`'s contents (not the folder itself, nor any __pycache__) to `handle` as a
    tar with the given owner, clearing the `clear` permission bits."""

    def chown(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in PurePosixPath(info.name).parts:
            return None
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        info.mode &= ~clear
        return info

    with tarfile.open(fileobj=handle, mode="w") as archive:
        for item in sorted(source.iterdir()):
            archive.add(str(item), arcname=item.name, filter=chown)


# -- out: a snapshot from the container's archive stream --------------------------------
class CapReached(Exception):
    """Raised by `BoundedReader` when a read would pass its limit."""


class BoundedReader:
    """A read-only file over a source's `read(n)` that never asks it for more than `limit`
    bytes in total, so no more than that is ever taken from the source."""

    def __init__(self, read: Callable[[int], bytes], limit: int) -> None:
        self._read = read
        self.limit = limit
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        room = self.limit - self.read_bytes
        if size < 0 or size > room:
            if room <= 0:
                raise CapReached
            size = room
        data = self._read(size)
        self.read_bytes += len(data)
        return data


def stream_limit(budget: SnapshotBudget) -> int:
    """Archive bytes one snapshot may read: what is left of the cap plus per-entry headers."""
    return budget.bytes_left + HEADER_ALLOWANCE * (budget.files_left + 4) + STREAM_SLACK


def extract_stream(reader: BoundedReader, dest: Path, strip: str, budget: SnapshotBudget) -> SnapshotReport:
    """Copy the members under `strip/` of a tar stream into `dest`, within `budget`."""
    report = SnapshotReport(cap_bytes=budget.max_bytes, cap_files=budget.max_files)
    writer = SnapshotWriter(dest)
    kept: set[PurePosixPath] = set()
    try:
        with tarfile.open(fileobj=reader, mode="r|", bufsize=CHUNK) as archive:  # type: ignore[call-overload]
            for member in archive:
                if not _extract_member(archive, member, strip, writer, kept, budget, report, reader):
                    report.stop(member.name.partition("/")[2] or member.name)
                    break
    except CapReached:
        report.stop("(the archive, cut at the cap)")  # the limit fell inside a header or the padding
    except (tarfile.ReadError, EOFError) as exc:
        if reader.read_bytes < reader.limit:
            raise SandboxError(f"the archive of the solution folder is unreadable: {exc}") from None
        report.stop("(the archive, cut at the cap)")
    writer.finish(report)
    report.read_bytes = reader.read_bytes
    return report


def _extract_member(archive: tarfile.TarFile, member: tarfile.TarInfo, strip: str, writer: SnapshotWriter,
                    kept: set[PurePosixPath], budget: SnapshotBudget, report: SnapshotReport,
                    reader: BoundedReader) -> bool:
    """Handle one member; False when the copy must stop here."""
    parts = PurePosixPath(member.name).parts
    if not parts or parts[0] != strip or len(parts) == 1:
        return True  # the folder itself, or not under it
    rel = safe_relative("/".join(parts[1:]))
    name = "/".join(parts[1:])
    if rel is None:
        report.leave_out(name, UNSAFE_NAME)
        return True
    if member.isreg():
        why = budget.fits(member.size)
        if why is None:
            source = archive.extractfile(member)
            if source is not None and writer.file(rel, source, member.size, member.mode, member.mtime):
                budget.take(member.size)
                report.bytes += member.size
                report.files += 1
                kept.add(rel)
                return True
            report.leave_out(name, NOT_A_FOLDER, member.size)
            return True
        report.leave_out(name, why, member.size)
        # Going on means reading past this file's data: only while that stays within the limit.
        return why != OVER_FILES and reader.read_bytes + member.size <= reader.limit
    why = budget.fits(0)
    if member.isdir():
        return admit(why is None and writer.folder(rel), name, why, budget, report)
    if member.issym():
        if not link_inside(rel.parent, member.linkname):
            report.leave_out(name, LINK_OUTSIDE)
            return True
        return admit(why is None and writer.symlink(rel, member.linkname), name, why, budget, report)
    if member.islnk():
        existing = safe_relative("/".join(PurePosixPath(member.linkname).parts[1:]))
        if existing is None or PurePosixPath(member.linkname).parts[0] != strip:
            report.leave_out(name, HARDLINK_OUTSIDE)
            return True
        if existing not in kept:
            report.leave_out(name, HARDLINK_LEFT_OUT)
            return True
        return admit(why is None and writer.hardlink(rel, existing), name, why, budget, report)
    if member.isfifo() or member.ischr() or member.isblk():
        kind = "fifo" if member.isfifo() else "device"
        report.leave_out(name, SPECIAL.format(kind=kind))
        return True
    report.leave_out(name, UNSUPPORTED)
    return True

