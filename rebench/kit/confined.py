"""Running the agent's code in a confined child process and talking to it (stdlib only).

A scorer holds held-out data and keeps the clock, so it never runs the agent's code in its
own process. It starts a worker script (ConfinedChild) as

    python -P -c SOURCE READ_FD WRITE_FD ARGS...

behind `ctx["confine_command"]` (the scoring helper's user switch and Landlock; see
score_helper.py), sends it one JSON object per line on READ_FD and reads the replies from
WRITE_FD: one JSON object per line, followed by `nbytes` raw bytes when it has that key.
Everything the child prints (stdout and stderr, merged) is drained by a thread that keeps
the first bytes (the confinement launcher's report) and the last OUTPUT_TAIL_BYTES.
`-P` keeps the working folder (the agent's solution) off the child's import path, so that
nothing the agent placed there runs before the worker has set up what it must first; the
worker imports the agent's files explicitly (`import_file`). The worker's end of the pipes
is `Channel`.

Each child gets a fresh scratch folder (`scratch_folder`; HOME and TMPDIR point there, and the
confinement lets it write nowhere else), removed when the child is closed; what this process
cannot remove (the confined user's own folders) the Docker exec server removes as root once the
scoring call's processes are dead.

The child is not trusted: the agent's code shares its interpreter. Replies are parsed
here as plain JSON and bytes, never unpickled, and a child that dies, stops answering or
sends something malformed raises ChildFailed or ChildTimeout, never hangs the scorer.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Sequence
from typing import Any

OUTPUT_TAIL_BYTES = 3000
"""How much of the end of the child's output is kept (and reported)."""
EXCERPT_CHARS = 600
"""How much of that tail an error message quotes when the child dies."""
_HEAD_BYTES = 256
_READ_CHUNK = 1 << 20
_CONFINED_BANNER = b"rebench-confine: active"


SCRATCH_PREFIX = "rebench-scratch-"
"""The name every scoring scratch folder starts with (beneath the scorer's temporary folder)."""


def scratch_folder() -> tuple[str, str]:
    """(outer, inner): a fresh private folder of this process (mode 0711: nobody else can list it)
    holding a folder of a random name that the confined user can write. Remove `outer` after use."""
    outer = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
    os.chmod(outer, 0o711)
    inner = tempfile.mkdtemp(dir=outer)
    os.chmod(inner, 0o777)
    return outer, inner


def confine_prefix(ctx: dict[str, Any], scratch: str) -> list[str]:
    """ctx["confine_command"] with `--scratch SCRATCH` before its closing `--` (empty without one)."""
    prefix = list(ctx.get("confine_command") or [])
    if prefix[-1:] == ["--"]:
        prefix[-1:] = ["--scratch", scratch, "--"]
    return prefix


def shared_memory_entries() -> dict[str, tuple[int, int]]:
    """The names in /dev/shm now, each with its file's (device, inode) (empty where there is none)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return {}
    entries: dict[str, tuple[int, int]] = {}
    for name in names:
        with contextlib.suppress(OSError):  # gone meanwhile
            info = os.lstat(os.path.join("/dev/shm", name))
            entries[name] = (info.st_dev, info.st_ino)
    return entries


def mapped_shared_memory() -> set[tuple[int, int]]:
    """(device, inode) of every file in /dev/shm that a process whose memory map this process may
    read has mapped now. By inode, not by name: a named semaphore is mapped under the temporary
    name sem_open made it under (shown "(deleted)"), then linked into place under its own."""
    try:
        shm_device = os.stat("/dev/shm").st_dev
    except OSError:
        return set()
    files: set[tuple[int, int]] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    if "/dev/shm/" not in line:
                        continue
                    # address perms offset major:minor inode path
                    fields = line.split(maxsplit=5)
                    major, minor = fields[3].split(":")
                    if os.makedev(int(major, 16), int(minor, 16)) == shm_device:
                        files.add((shm_device, int(fields[4])))
        except (OSError, ValueError, IndexError):  # gone, or another user's: what it maps is not kept on its account
            continue
    return files


def remove_new_shared_memory(before: dict[str, tuple[int, int]]) -> None:
    """Remove what this process can of the /dev/shm entries made since `before` was taken (a
    confined child may use shared memory; what it leaves must not outlive the call: the Docker
    exec server removes the rest, owned by another user, when the call ends). An entry that a live
    process still maps is another process's (the child is gone by now: a parallel build's or
    attempt's semaphore, made during the call by the same user) and stays. The names are listed
    before the maps are read: a semaphore is mapped by its maker before its name appears, so a
    listed entry that a live process made is in a map read afterwards. (Matched by name and read
    before the listing, live semaphores were removed: a parallel build's process pool lost its
    locks and restarted its workers forever.) A new name for a file that was there before the call
    goes, mapped or not: the submitted code could otherwise keep what it wrote by linking or moving
    a long-lived process's shared memory to a name of its own (tests/adversarial/
    test_shared_memory_links.py); the files are known by inode from `before`, as a moved file's old
    name is gone by now."""
    new = shared_memory_entries().keys() - before.keys()
    if not new:
        return
    in_use = mapped_shared_memory() - set(before.values())
    for name in new:
        path = os.path.join("/dev/shm", name)
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if (info.st_dev, info.st_ino) in in_use:
                continue
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)


def remove_scratch(folder: str) -> None:
    """Remove what this process can of a scratch folder (the rest is the exec server's)."""
    for root, dirs, _ in os.walk(folder):
        for name in dirs:
            with contextlib.suppress(OSError):
                if os.stat(os.path.join(root, name), follow_symlinks=False).st_uid == os.getuid():
                    os.chmod(os.path.join(root, name), 0o700)
    shutil.rmtree(folder, ignore_errors=True)


class ChildFailed(Exception):
    """The child died or broke the protocol."""


class ChildTimeout(Exception):
    """The child did not answer in time."""


class ConfinedChild:
    """One worker script in a confined child, with its pipes, its output tail and its scratch
    folder (`scratch`: a given folder the caller removes, else a fresh one removed on close)."""

    def __init__(self, ctx: dict[str, Any], source: str, args: Sequence[str], *, cwd: str,
                 pass_fds: Sequence[int] = (), name: str = "the solution's process",
                 scratch: str | None = None) -> None:
        self.name = name
        self._shared_before = shared_memory_entries()
        self._own_scratch: str | None = None
        if scratch is None:
            self._own_scratch, scratch = scratch_folder()
        self.scratch: str = scratch
        to_child, self._to_child = os.pipe()
        self._from_child, from_child = os.pipe()
        prefix = confine_prefix(ctx, self.scratch)
        command = [*prefix, sys.executable, "-P", "-c", source, str(to_child), str(from_child), *args]
        env = dict(os.environ) if prefix else {  # the launcher points them at the scratch itself
            **os.environ, "HOME": self.scratch, "TMPDIR": self.scratch, "TMP": self.scratch, "TEMP": self.scratch}
        try:
            self.proc = subprocess.Popen(command, pass_fds=(to_child, from_child, *pass_fds), cwd=cwd,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env)
        except OSError:
            for fd in (self._to_child, self._from_child):
                os.close(fd)
            if self._own_scratch:
                remove_scratch(self._own_scratch)
            raise
        finally:
            os.close(to_child)
            os.close(from_child)
        self._head = b""
        self._tail = b""
        self._buffer = b""
        self._closed = False
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()

    def _read_output(self) -> None:
        fd = self.proc.stdout.fileno() if self.proc.stdout is not None else -1
        while chunk := os.read(fd, _READ_CHUNK):
            if len(self._head) < _HEAD_BYTES:
                self._head = (self._head + chunk)[:_HEAD_BYTES]
            self._tail = (self._tail + chunk)[-OUTPUT_TAIL_BYTES:]

    @property
    def confined(self) -> bool:
        """Whether the confinement launcher reported Landlock active (its first line, which
        the agent's own output cannot precede)."""
        return self._head.startswith(_CONFINED_BANNER)

    def output_tail(self) -> str:
        """The end of what the child printed (at most OUTPUT_TAIL_BYTES)."""
        return self._tail.decode("utf-8", errors="replace")

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode() + b"\n"
        try:
            while data:
                data = data[os.write(self._to_child, data):]
        except (BrokenPipeError, OSError) as exc:
            raise ChildFailed(self.died()) from exc

    def receive(self, timeout_s: float | None = None, *, max_payload_bytes: int | None = 0) -> dict[str, Any]:
        """The next reply (with its raw bytes under "payload"); ChildTimeout when none comes
        within `timeout_s` (None: wait for as long as the scoring call may run). A reply that
        announces more than `max_payload_bytes` (None: no limit) is refused unread."""
        deadline = None if timeout_s is None else time.perf_counter() + timeout_s
        while b"\n" not in self._buffer:
            self._fill(deadline, timeout_s)
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
            nbytes = int(reply.get("nbytes", 0))
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise ChildFailed(f"{self.name} sent a malformed reply: {line[:200]!r}") from exc
        if max_payload_bytes is not None and nbytes > max_payload_bytes:
            raise ChildFailed(f"{self.name} announced {nbytes} bytes; at most {max_payload_bytes} are allowed")
        chunks, left = [], max(nbytes, 0)
        while left:  # as it arrives: a claimed size is never allocated up front
            if not self._buffer:
                self._fill(deadline, timeout_s)
            piece, self._buffer = self._buffer[:left], self._buffer[left:]
            chunks.append(piece)
            left -= len(piece)
        reply["payload"] = b"".join(chunks)
        return reply

    def _fill(self, deadline: float | None, timeout_s: float | None) -> None:
        if deadline is not None:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise ChildTimeout(f"a call took longer than {timeout_s:g} s")
        chunk = os.read(self._from_child, _READ_CHUNK)
        if not chunk:
            raise ChildFailed(self.died())
        self._buffer += chunk

    def died(self) -> str:
        """Why the child stopped answering: its exit status and the end of its output (a child
        that closed its pipe but lives on is killed)."""
        try:
            code: int | None = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._drain.join(timeout=2)
        return f"{self.name} exited with {code}: {self.output_tail()[-EXCERPT_CHARS:]}"

    def close(self, grace_s: float = 5.0) -> None:
        """Close the child's input (its message loop ends), give it `grace_s` to exit, then kill it."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            os.close(self._to_child)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            os.close(self._from_child)
        self._drain.join(timeout=2)
        if self._own_scratch:
            remove_scratch(self._own_scratch)
        remove_new_shared_memory(self._shared_before)


class Channel:
    """The worker's end of ConfinedChild's pipes, from its arguments (READ_FD WRITE_FD ARGS...).
    Its stdout is pointed at its stderr, where the agent's prints belong."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.inbox, self.outbox = os.fdopen(int(argv[1]), "rb"), os.fdopen(int(argv[2]), "wb")
        self.args = list(argv[3:])
        os.dup2(2, 1)

    def receive(self) -> dict[str, Any] | None:
        """The scorer's next message, or None when it asks the worker to end (EOF or an empty line)."""
        line = self.inbox.readline()
        return json.loads(line) if line.strip() else None

    def send(self, message: dict[str, Any], payload: bytes = b"") -> None:
        """A reply; `payload` follows it, announced by the caller as message["nbytes"]."""
        self.outbox.write(json.dumps(message).encode() + b"\n" + payload)
        self.outbox.flush()


def import_file(folder: str, filename: str, name: str) -> types.ModuleType:
    """Import FOLDER/FILENAME as module `name`, with FOLDER first on sys.path so that the agent's
    file can import its neighbours."""
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, filename))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {folder}/{filename}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
