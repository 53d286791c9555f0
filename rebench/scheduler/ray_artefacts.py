"""An attempt's files on a Ray worker (its snapshots, an installed agent's model-call bodies and
session logs), carried to the head's snapshot folder in the task's batches.

On the worker the runner writes them into a folder of its own (`Outbox.root`), never at the head's
path: on a real cluster that path is on another machine, and `rebench rescore`, `export inspect`
and `view` on the head read the head's disk. The outbox walks that folder every SCAN_EVERY_S and
hands out, at most CHUNK_BYTES of file content a batch (object stores may be small), every folder,
every file whose size and time stood still over one walk, every link's target, and every name that
went (a duplicate score snapshot is removed again); the last walk, once the attempt ended, hands
out everything left. Links are sent as their targets, never followed, and a file is opened with
O_NOFOLLOW and sent only when it is a regular file: the folder holds what an agent wrote.

The head's side (`Inbox`) treats every name as data: one of the attempt's own two folders
(`attempt-N[.K]` and `attempt-N[.K]-agent`), then plain parts (no `..`, no absolute path, no empty
part); it writes only beneath its own snapshot folder, through real folders it made, each file
first into a folder of its own and then renamed into place, and a link only when its target stays
inside the attempt's folder. The paths in the rows the worker sends name the worker's folder; the
head rewrites them to its own (`rebase`), so the store names the files where they now are.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections import deque
from pathlib import Path, PurePosixPath
from typing import Any

from rebench.errors import RebenchError
from rebench.sandbox.snapshot import link_inside

CHUNK_BYTES = 4 * 2**20
"""The most file content one batch carries."""
SCAN_EVERY_S = 2.0
"""How often the worker's folder is walked while the attempt runs."""
MAX_NAME = 4096
NAME_COST = 256
"""What an item counts for in a batch besides its name and content."""

Signature = tuple[Any, ...]


def _signature(info: os.stat_result) -> Signature:
    return (info.st_size, info.st_mtime_ns, info.st_ino, bool(info.st_mode & 0o111))


class Outbox:
    """The worker's side: what of `root` the head has not got yet."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sent: dict[str, Signature] = {}
        self.seen: dict[str, Signature] = {}
        self.queue: deque[str] = deque()
        self.queued: set[str] = set()
        self.reading: tuple[str, int, int, Signature] | None = None
        """(name, fd, offset, signature) of the file whose content is being sent."""
        self.gone: list[str] = []
        self.last_scan = float("-inf")
        self.finished = False
        """The last walk was made (the attempt ended): nothing changes any more."""

    def _walk(self) -> dict[str, tuple[str, Signature]]:
        """Every entry under root, parents first, by name: (kind, signature); links never followed."""
        found: dict[str, tuple[str, Signature]] = {}
        stack = [""]
        while stack:
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(self.root / folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                name = f"{folder}/{entry.name}" if folder else entry.name
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    found[name] = ("dir", ())
                    stack.append(name)
                elif stat.S_ISLNK(info.st_mode):
                    with contextlib.suppress(OSError):
                        found[name] = ("link", ("link", os.readlink(entry.path)))
                elif stat.S_ISREG(info.st_mode):
                    found[name] = ("file", _signature(info))
                # anything else (a FIFO, a device, a socket) is never sent
        return found

    def scan(self, final: bool) -> None:
        """Queue what changed; while the attempt runs, a file only once it stood still over a walk."""
        now = time.monotonic()
        if self.finished or (not final and now - self.last_scan < SCAN_EVERY_S):
            return
        self.last_scan, self.finished = now, final
        found = self._walk() if self.root.is_dir() else {}
        for name in sorted(set(self.sent) - set(found), reverse=True):
            del self.sent[name]
            self.gone.append(name)
        for name, (kind, signature) in sorted(found.items()):
            steady = final or kind != "file" or self.seen.get(name) == signature
            if self.sent.get(name) != signature and steady and name not in self.queued:
                self.queue.append(name)
                self.queued.add(name)
        self.seen = {name: signature for name, (_, signature) in found.items()}

    def pending(self) -> bool:
        return bool(self.queue or self.reading or self.gone)

    def take(self, final: bool = False) -> list[dict[str, Any]]:
        """The next items for the head, at most CHUNK_BYTES of content (a name counts too)."""
        self.scan(final)
        items: list[dict[str, Any]] = [{"op": "gone", "name": name} for name in self.gone]
        self.gone = []
        budget = CHUNK_BYTES - sum(NAME_COST + len(name) for name in items)
        while budget > 0 and (self.reading or self.queue):
            if self.reading is None:
                name = self.queue.popleft()
                self.queued.discard(name)
                item = self._start(name)
                if item is not None:
                    items.append(item)
                    budget -= NAME_COST + len(name)
                continue
            name, fd, offset, signature = self.reading
            wanted = min(budget, signature[0] - offset)
            data = os.pread(fd, wanted, offset) if wanted > 0 else b""
            end = len(data) < wanted or offset + len(data) >= signature[0]
            items.append({"op": "file", "name": name, "offset": offset, "data": data, "end": end,
                          "exec": signature[3]})
            budget -= NAME_COST + len(name) + len(data)
            if end:
                os.close(fd)
                self.reading = None
                self.sent[name] = signature
            else:
                self.reading = (name, fd, offset + len(data), signature)
        return items

    def _start(self, name: str) -> dict[str, Any] | None:
        """A folder's or a link's item at once; a file's content is read from here on."""
        path = self.root / name
        try:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                self.sent[name] = ()
                return {"op": "dir", "name": name}
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
                self.sent[name] = ("link", target)
                return {"op": "link", "name": name, "target": target}
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None  # gone meanwhile, or swapped for a link: the next walk sees what is there
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        self.reading = (name, fd, 0, _signature(info))
        return None

    def close(self) -> None:
        if self.reading is not None:
            os.close(self.reading[1])
            self.reading = None


def checked_name(name: object, tops: tuple[str, ...]) -> PurePosixPath:
    """A name a worker sent, as a relative path beneath one of `tops`; RebenchError otherwise."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or "\0" in name:
        raise RebenchError(f"a worker sent the file name {str(name)[:200]!r}: not a plain relative name")
    parts = name.split("/")
    if any(part in ("", ".", "..") or len(part.encode()) > 255 for part in parts) or parts[0] not in tops:
        raise RebenchError(f"a worker sent the file name {name[:200]!r}: only plain names beneath "
                           f"{' or '.join(tops)} are written")
    return PurePosixPath(name)


class Inbox:
    """The head's side: writes what a worker sends beneath `root`, into the attempt's folders `tops`."""

    def __init__(self, root: Path, tops: tuple[str, ...]) -> None:
        self.root = root
        self.tops = tops
        self.refused: list[str] = []
        """Why items were not written (one line each; the attempt's record gets them)."""
        self._staging: Path | None = None
        self._open: dict[str, tuple[int, Path, int]] = {}
        """name -> (fd, staged path, next offset) of files being received."""
        self._count = 0

    def apply(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            try:
                self._one(item)
            except (RebenchError, OSError) as exc:
                self.refused.append(str(exc) if isinstance(exc, RebenchError)
                                    else f"{item.get('name')!r}: {exc.strerror or exc}")

    def _one(self, item: dict[str, Any]) -> None:
        name = checked_name(item.get("name"), self.tops)
        op = item.get("op")
        if len(name.parts) == 1 and op not in ("dir", "gone"):
            raise RebenchError(f"{str(name)!r}: the attempt's folder itself must be a folder: not written")
        if op == "dir":
            self._folder(name)
        elif op == "gone":
            self._remove(self.root / name)
        elif op == "link":
            target = str(item.get("target", ""))
            if not link_inside(name.parent.relative_to(name.parts[0]), target):
                raise RebenchError(f"{str(name)!r}: a link leading outside the attempt's folder (-> {target[:200]!r})"
                                   ": not written")
            staged = self._staged()
            os.symlink(target, staged)
            self._place(staged, name)
        elif op == "file":
            self._chunk(name, item)
        else:
            raise RebenchError(f"a worker sent an item of kind {str(op)[:40]!r}: not written")

    def _folder(self, name: PurePosixPath) -> Path:
        """root/name as a real folder, made part by part; a link or a file on the way is an error."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root
        for part in name.parts:
            path = path / part
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    raise RebenchError(f"{str(name)!r}: {str(path)!r} is not a folder: not written") from None
        return path

    def _staged(self) -> Path:
        if self._staging is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(prefix=".rebench-incoming-", dir=self.root))
        self._count += 1
        return self._staging / str(self._count)

    def _place(self, staged: Path, name: PurePosixPath) -> None:
        parent = self._folder(name.parent)
        target = parent / name.name
        if os.path.lexists(target) and stat.S_ISDIR(os.lstat(target).st_mode):
            shutil.rmtree(target)
        os.replace(staged, target)

    def _chunk(self, name: PurePosixPath, item: dict[str, Any]) -> None:
        key, offset, data = str(name), item.get("offset"), item.get("data")
        if not isinstance(data, bytes) or not isinstance(offset, int):
            raise RebenchError(f"{key!r}: a file item without bytes at an offset: not written")
        if offset == 0:
            self._drop(key)
            staged = self._staged()
            self._open[key] = (os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600),
                               staged, 0)
        fd, staged, expected = self._open.get(key, (-1, Path(), -1))
        if offset != expected:
            self._drop(key)
            raise RebenchError(f"{key!r}: content at offset {offset}, {expected} expected: not written")
        os.write(fd, data)
        self._open[key] = (fd, staged, expected + len(data))
        if item.get("end"):
            del self._open[key]
            os.fchmod(fd, 0o755 if item.get("exec") else 0o644)
            os.close(fd)
            self._place(staged, name)

    def _drop(self, key: str) -> None:
        fd, staged, _ = self._open.pop(key, (-1, Path(), 0))
        if fd >= 0:
            os.close(fd)
            staged.unlink(missing_ok=True)

    def _remove(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path)
            else:
                path.unlink()

    def close(self) -> None:
        """Files left half-received are dropped; the staging folder goes."""
        for key in list(self._open):
            self._drop(key)
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None


def rebase(value: Any, old: str, new: str) -> Any:
    """`value` with every mention of `old` or of a path beneath it, as a whole string or inside one (a
    note's message), naming the same beneath `new`."""
    if isinstance(value, str):
        return re.sub(re.escape(old) + r"(?![\w.-])", lambda _: new, value) if old in value else value
    if isinstance(value, dict):
        return {key: rebase(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [rebase(item, old, new) for item in value]
    return value
