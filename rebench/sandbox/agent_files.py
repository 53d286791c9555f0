"""File tools that act as the agent: the kernel, not a path string, decides what they may touch.

An agent's (or a human's) `read_file`, `write_file` and `upload_dir` name a path the agent
chose. In a container they must not run as root: the engine's archive API ignores
permissions, so `/./protected/...`, `/home/../protected/...`, a symlink into `/protected`
or a write to `/opt/rebench/score_helper.py` or `/etc/ld.so.preload` would all succeed.
So a container backend runs `AGENT_IO_SOURCE`, a small stdlib program, as the agent user
through its exec channel: the file's bytes go through the command's stdin and stdout,
symlinks are followed with the agent's own rights, and the reply says what the kernel said
(an errno, turned back into the matching OSError here: PermissionError, FileNotFoundError,
IsADirectoryError...). The local backend runs everything as the harness's user anyway and
applies the same rules in process (`local_read`, `local_write`).

Limits: one read or write moves at most `AGENT_FILE_LIMIT_BYTES`, one upload at most
`AGENT_UPLOAD_LIMIT_BYTES` of archive; past them the tool fails with EFBIG and says so,
instead of cutting the file.
"""

from __future__ import annotations

import errno
import io
import json
import os
import tarfile
from pathlib import Path, PurePosixPath

AGENT_FILE_LIMIT_BYTES = 16 * 1024 * 1024
"""The most one agent read_file or write_file moves (bash's head, tail and split read more)."""
AGENT_UPLOAD_LIMIT_BYTES = 64 * 1024 * 1024
"""The most one upload_dir sends (the tar archive of the folder)."""
ERROR_EXIT = 3
"""Exit status of AGENT_IO_SOURCE when the operation failed; its last stderr line is JSON."""

AGENT_IO_SOURCE = r"""
import json, os, stat, sys, tarfile
op, path, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])

def fail(code, text, name):
    sys.stderr.write(json.dumps({"errno": code, "strerror": text, "filename": name}) + "\n")
    sys.exit(3)

def write(target, data, mode=0o666):
    folder = os.path.dirname(target)
    if folder:
        os.makedirs(folder, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)

try:
    if op == "read":
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            fail(21, "Is a directory", path)
        if not stat.S_ISREG(info.st_mode):
            fail(22, "Not a regular file", path)
        if info.st_size > limit:
            fail(27, "File too large: %d bytes, over the %d-byte limit of one read" % (info.st_size, limit), path)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            fail(27, "File too large: over the %d-byte limit of one read" % limit, path)
        sys.stdout.buffer.write(data)
    elif op == "write":
        data = sys.stdin.buffer.read(limit + 1)
        if len(data) > limit:
            fail(27, "File too large: over the %d-byte limit of one write" % limit, path)
        write(path, data)
    elif op == "unpack":
        os.makedirs(path, exist_ok=True)
        with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as archive:
            for member in archive:
                parts = member.name.split("/")
                if member.name.startswith("/") or ".." in parts:
                    fail(22, "Unsafe name in the archive", member.name)
                target = os.path.join(path, member.name)
                if member.isdir():
                    os.makedirs(target, exist_ok=True)
                elif member.isfile():
                    write(target, archive.extractfile(member).read(), member.mode & 0o777)
    else:
        fail(22, "Unknown operation " + op, path)
except OSError as exc:
    fail(exc.errno or 5, exc.strerror or str(exc), exc.filename if exc.filename is not None else path)
"""


def agent_io_argv(python: str, op: str, path: str, limit: int) -> list[str]:
    """The command that runs `op` on `path` as whoever runs it (isolated mode: no site, no env)."""
    return [python, "-I", "-S", "-c", AGENT_IO_SOURCE, op, path, str(limit)]


def raise_for_reply(exit_code: int | None, stderr: str, path: str, what: str) -> None:
    """Raise the OSError the program reported (exit ERROR_EXIT), or a plain OSError for anything else."""
    if exit_code == 0:
        return
    if exit_code == ERROR_EXIT:
        for line in reversed(stderr.strip().splitlines()):
            try:
                said = json.loads(line)
            except ValueError:
                continue
            if isinstance(said, dict) and isinstance(said.get("errno"), int):
                raise OSError(said["errno"], str(said.get("strerror") or ""), str(said.get("filename") or path))
    raise OSError(errno.EIO, f"{what} failed (exit {exit_code}): {stderr.strip()[-300:]}", path)


def too_large(path: str, size: int, limit: int, what: str) -> OSError:
    return OSError(errno.EFBIG, f"File too large: {size} bytes, over the {limit}-byte limit of one {what}", path)


def pack_folder(source: Path, limit: int = AGENT_UPLOAD_LIMIT_BYTES) -> bytes:
    """`source`'s contents as a tar (no __pycache__), at most `limit` bytes, else EFBIG."""
    if not source.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(source))
    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in PurePosixPath(info.name).parts or not (info.isdir() or info.isfile()):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for item in sorted(source.iterdir()):
            archive.add(str(item), arcname=item.name, filter=plain)
    data = buffer.getvalue()
    if len(data) > limit:
        raise too_large(str(source), len(data), limit, "upload")
    return data


# -- the local backend: the harness's user is the agent there -------------------------------------
def local_read(path: Path, limit: int = AGENT_FILE_LIMIT_BYTES) -> bytes:
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise too_large(str(path), path.stat().st_size, limit, "read")
    return data


def local_write(path: Path, data: bytes, limit: int = AGENT_FILE_LIMIT_BYTES) -> None:
    if len(data) > limit:
        raise too_large(str(path), len(data), limit, "write")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def local_unpack(archive: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
        for member in tar:
            target = dest / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                local_write(target, source.read(), limit=len(archive))
                target.chmod(member.mode & 0o777)
