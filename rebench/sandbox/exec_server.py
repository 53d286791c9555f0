#!/usr/bin/env python3
"""rebench exec server: the long-lived channel into a Docker sandbox (stdlib only).

It runs as the container's main process (root), reads requests from stdin and
writes replies to stdout, so one attached stream carries every tool call: no
`docker exec` round trip (about 50 ms) per command. Each command runs as the
requested user (uid, gid, supplementary groups resolved inside the container)
in a new session; a timeout or a `kill` request SIGKILLs that session, its
process group and every process that still carries the command's marker in its
environment, so a tree that called setsid() is killed too.

Frames both ways: 4-byte big-endian length, then UTF-8 JSON. Binary fields are
base64. Requests:

    {"id": 1, "op": "ping", "users": ["agent"], "groups": ["protected"]}   (ids resolved)
    {"id": 2, "op": "exec", "argv": [...], "user": "agent", "groups": ["protected"],
     "env": {...}, "cwd": "/home/agent", "cwd_fallback": true, "stdin": "<b64>" | null,
     "timeout": 10.0, "limit": 1000000, "reap_groups": ["protected"]}
    {"id": 3, "op": "kill", "target": 2}

`reap_groups` / `reap_users`: when the command ends, every process still holding
one of these groups, or running as one of these users, is killed (nothing a score
call started may outlive it). `frozen_users`: the harness has frozen these users' processes
with the cgroup freezer from the host (the agent's cgroup, rebench/sandbox/docker/cgroups.py)
for the length of this command; while it runs, commands as these users are refused, and
`share_read` folders are made readable to others where these users own them (see share_read).
`close_to_others` folders (/dev/shm) lose group and others' write permission where
these users own them (see close_to_others).
`sweep`: [{"user", "dirs"}, ...]: once the
reaped processes are dead, everything the user owns beneath those folders is removed (see
sweep_owned), before the harness thaws the agent. `caps`: capabilities the command keeps as ambient ones
after the user switch (the bounding set is cut to them), e.g. `["setuid", "setgid"]`
for the scorer, which runs the submitted code as a third user. The reply carries the exit code (128+signal
when killed), head and tail of stdout and stderr within `limit` bytes each with
the count dropped, and whether it timed out.

As PID 1 it also reaps orphaned processes, which the kernel hands to it.

Agent-side commands (those run as `agent`, and root ones marked `agent_side`, such as the
SSH gate) are not forked by this server but by its **spawner**: a child forked before
anything else, which the harness moves into the agent's cgroup from the host, so every
process of the agent is born there and the harness can freeze, count and kill them all
without touching its own commands. Until the harness says the spawner is placed
(`{"op": "agent_cgroup", "spawner": PID}`), agent-side commands are refused.

Keep-alive mode (`--listen SOCKET`, human attempts): the channel is a Unix socket in
the mounted gate folder instead of stdin/stdout, so a harness can come back after its
process died. One harness connection is served at a time (a new one takes over);
when it closes, that connection's commands are killed (whatever they froze is thawed)
and the server keeps running for the next one. It also serves the `task` command on
/run/rebench-task/task.sock: a request from the agent's uid (SO_PEERCRED) goes to the
harness as an unsolicited frame {"id": null, "event": "task", "task": N, "command",
"args", "uid", "pid"}; the harness answers with {"op": "task_reply", "task": N,
"exit_code", "output"}, which is written back to the client as one JSON line.
"""

from __future__ import annotations

import base64
import contextlib
import grp
import json
import os
import pwd
import selectors
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable

MARKER_VAR = "REBENCH_EXEC_ID"
HEADER = struct.Struct(">I")
READ_CHUNK = 65536
SETPRIV = shutil.which("setpriv")
EXIT_GRACE_S = 0.2
"""After the command exits, how long to wait for its pipes to close (a background
child may hold them open; it keeps running, its later output is dropped)."""


class Capture:
    """Keeps the head and the tail of a stream within `limit` bytes, counting the rest.

    The same rule as rebench.sandbox.output.head_and_tail, kept as its own copy: this file
    is sent whole into the container and imports nothing of rebench (tests/test_output_cut.py
    checks that the two agree)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(2, limit)
        self.half = self.limit // 2
        self.head = bytearray()
        self.tail: bytearray | None = None
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if self.tail is None:
            self.head += data
            if len(self.head) > self.limit:
                self.tail = self.head[self.half :]
                del self.head[self.half :]
        else:
            self.tail += data
        if self.tail is not None and len(self.tail) > 4 * self.half:
            del self.tail[: len(self.tail) - self.half]

    def result(self) -> dict:
        if self.tail is None:
            return {"head": base64.b64encode(bytes(self.head)).decode(), "tail": "", "dropped": 0}
        tail = bytes(self.tail[-self.half :])
        return {
            "head": base64.b64encode(bytes(self.head)).decode(),
            "tail": base64.b64encode(tail).decode(),
            "dropped": self.total - len(self.head) - len(tail),
        }


class Job:
    def __init__(self, request: dict, proc: subprocess.Popen | RemoteProc, marker: str) -> None:
        self.id = request["id"]
        self.proc = proc
        self.marker = marker
        limit = int(request.get("limit") or 1_000_000)
        self.out = Capture(limit)
        self.err = Capture(limit)
        self.started = time.monotonic()
        timeout = request.get("timeout")
        self.deadline = self.started + float(timeout) if timeout else None
        self.timed_out = False
        self.killed = False
        self.exit_code: int | None = None
        self.exited_at: float | None = None
        self.open_pipes = 0
        self.stdin_data = b""
        self.spawn_s = 0.0
        self.reap_groups: list[str] = list(request.get("reap_groups") or [])
        self.reap_users: list[str] = list(request.get("reap_users") or [])
        self.sweep: list[dict] = list(request.get("sweep") or [])
        self.frozen_uids: set[int] = set()
        self.generation = 0


def _proc_stat(pid: str) -> tuple[int, int] | None:
    """(process group, session) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[2]), int(fields[3])


def _environ(pid: str) -> bytes:
    """A process's environment. Root in a container lacks CAP_SYS_PTRACE, so another
    user's environ is read with that user's effective uid (this server is single-threaded)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except PermissionError:
        pass
    except OSError:
        return b""
    try:
        info = os.stat(f"/proc/{pid}")
        os.setegid(info.st_gid)
        os.seteuid(info.st_uid)
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                return handle.read()
        finally:
            os.seteuid(0)
            os.setegid(0)
    except OSError:
        return b""


def _stat_fields(pid: str) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def _process_uids(pid: str) -> set[int]:
    """Real, effective, saved and filesystem uid of a process (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"Uid:"):
                    return {int(x) for x in line.split()[1:]}
    except OSError:
        pass
    return set()


SHARE_LIMIT = 200_000
"""At most this many entries of the agent's solution are looked at per score call."""


def share_read(roots: list[str], uid: int) -> None:
    """Let the scorer and the submitted code (other users) read what `uid` owns beneath
    `roots`: read permission for others on files and folders, search on folders (and on
    the folders above a root). Scoring used to run as the agent and read even its 0600
    files; it no longer does. Symbolic links are neither followed nor changed; the
    owner is frozen meanwhile, so nothing can be swapped under this walk."""

    def widen(path: str, folder_only: bool = False) -> None:
        try:
            info = os.lstat(path)
        except OSError:
            return
        if info.st_uid != uid or stat.S_ISLNK(info.st_mode):
            return
        is_dir = stat.S_ISDIR(info.st_mode)
        if folder_only and not is_dir:
            return
        wanted = stat.S_IXOTH if folder_only else stat.S_IROTH
        if is_dir or info.st_mode & stat.S_IXUSR:
            wanted |= stat.S_IXOTH
        if info.st_mode & wanted != wanted:
            with contextlib.suppress(OSError):
                os.chmod(path, stat.S_IMODE(info.st_mode) | wanted)

    seen = 0
    for root in roots:
        parent = os.path.dirname(root.rstrip("/"))
        while parent not in ("", "/"):
            widen(parent, folder_only=True)
            parent = os.path.dirname(parent)
        for folder, _, files in os.walk(root):
            for path in (folder, *(os.path.join(folder, name) for name in files)):
                widen(path)
                seen += 1
            if seen > SHARE_LIMIT:
                return


def close_to_others(roots: list[str], uid: int) -> None:
    """Take group and others' write permission from what `uid` owns beneath `roots` (not
    following links). Used on /dev/shm at a score call: the submitted code may use shared memory
    there, so the agent must not leave a world-writable file or folder in it for that code to
    fill. Harmless to the agent, whose own processes keep their access as the owner; the owner
    is frozen meanwhile, so nothing can be swapped under this walk."""
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for path in (folder, *(os.path.join(folder, name) for name in dirs + files)):
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if info.st_uid == uid and not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
                    with contextlib.suppress(OSError):
                        os.chmod(path, stat.S_IMODE(info.st_mode) & ~0o022)


def kill_matching(match: Callable[[str], bool]) -> int:
    """SIGKILL every process (but this server) for which `match(pid string)` holds; sweep until none."""
    me = os.getpid()
    killed = 0
    for _ in range(20):
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != me:
                with contextlib.suppress(OSError):
                    if match(entry):
                        found.append(int(entry))
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
        time.sleep(0.005)
    return killed


def sweep_owned(roots: list[str], uid: int) -> int:
    """Remove everything `uid` owns beneath `roots` (not the roots themselves), without following
    links: what a score call's users wrote, removed before the agent runs again. Run as root,
    after every process of `uid` is dead."""
    removed = 0
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in list(dirs) + files:
                path = os.path.join(folder, name)
                try:
                    info = os.lstat(path)
                except OSError:
                    continue
                if info.st_uid != uid:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    dirs.remove(name)
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                removed += 1
    return removed


def kill_group_members(gid: int) -> int:
    """SIGKILL every process holding supplementary group `gid` (what a scoring run
    started, including daemons that left its session and scrubbed its marker)."""
    killed = 0
    me = os.getpid()
    for _ in range(20):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/status", "rb") as handle:
                    status = handle.read()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith(b"Groups:"):
                    if str(gid).encode() in line.split()[1:]:
                        found.append(int(entry))
                    break
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
        time.sleep(0.005)
    return killed


def kill_tree(root_pid: int, marker: str) -> int:
    """SIGKILL the command's session, group and marked processes; sweep until none is left."""
    needle = f"{MARKER_VAR}={marker}".encode()
    me = os.getpid()
    killed = 0
    for _ in range(20):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            ids = _proc_stat(entry)
            if ids is None:
                continue
            hit = root_pid in ids or int(entry) == root_pid
            if not hit:
                hit = needle in _environ(entry)
            if hit:
                found.append(int(entry))
        if not found:
            break
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed += len(found)
        time.sleep(0.005)
    return killed



SPAWN_REPLY_S = 10.0
"""How long the spawner may take to answer a spawn request before the command is refused."""


class RemoteProc:
    """A command forked by the spawner: its pid and this server's ends of its pipes (what
    Popen gives for its own children); `returncode` arrives in an exit message."""

    def __init__(self, pid: int, stdin: int | None, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin, "wb", buffering=0) if stdin is not None else None
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.stderr = os.fdopen(stderr, "rb", buffering=0)
        self.returncode: int | None = None

    def wait(self) -> int | None:
        return self.returncode


def _spawner_main(sock: socket.socket) -> None:
    """The spawner's loop: fork each requested command with the descriptors that came with the
    request, answer its pid, and report its exit status when it ends."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the server's channel (stdin/stdout) is not the spawner's to hold
        os.dup2(devnull, fd)
    os.close(devnull)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    children: dict[int, subprocess.Popen] = {}
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "sock")
    sel.register(wake_r, selectors.EVENT_READ, "wake")
    while True:
        for key, _ in sel.select(1.0):
            if key.data == "wake":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                continue
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3, socket.MSG_CMSG_CLOEXEC)
            if not data:
                os._exit(0)  # the server is gone
            request = json.loads(data)
            reply: dict
            try:
                stdin = fds[2] if request.get("stdin") else subprocess.DEVNULL
                proc = subprocess.Popen(
                    request["argv"], stdin=stdin, stdout=fds[0], stderr=fds[1], cwd=request["cwd"],
                    env=request["env"], start_new_session=True, close_fds=False, **(request.get("switch") or {}))
                children[proc.pid] = proc
                reply = {"pid": proc.pid}
            except Exception as exc:
                reply = {"error": str(exc), "type": type(exc).__name__}
            finally:
                for fd in fds:
                    os.close(fd)
            sock.send(json.dumps(reply).encode())
        for pid, proc in list(children.items()):
            code = proc.poll()
            if code is not None:
                del children[pid]
                sock.send(json.dumps({"exit": pid, "code": code}).encode())


class Spawner:
    """This server's handle on the spawner (see the module's docstring)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                _spawner_main(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.pid = pid
        self.sock = ours
        self.placed = False
        self.exits: list[tuple[int, int]] = []

    def spawn(self, argv: list[str], *, cwd: str, env: dict, switch: dict, stdin: bool) -> RemoteProc:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if stdin else (None, None)
        fds = [out_w, err_w, *([in_r] if in_r is not None else [])]
        try:
            request = {"argv": argv, "cwd": cwd, "env": env, "switch": switch, "stdin": stdin}
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
        finally:
            for fd in fds:
                os.close(fd)
        deadline = time.monotonic() + SPAWN_REPLY_S
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select_readable(self.sock, left):
                    raise OSError("the agent's spawner did not answer (is the agent's cgroup frozen?)")
                message = json.loads(self.sock.recv(1 << 16) or b"null")
                if message is None:
                    raise OSError("the agent's spawner is gone")
                if "exit" in message:
                    self.exits.append((int(message["exit"]), int(message["code"])))
                    continue
                if "error" in message:
                    kind = FileNotFoundError if message.get("type") == "FileNotFoundError" else OSError
                    raise kind(message["error"])
                return RemoteProc(int(message["pid"]), in_w, out_r, err_r)
        except BaseException:
            for own in (out_r, err_r, in_w):
                if own is not None:
                    os.close(own)
            raise

    def take_exits(self) -> list[tuple[int, int]]:
        """Exit statuses reported since the last call (reads what the socket holds, never blocks)."""
        while select_readable(self.sock, 0):
            data = self.sock.recv(1 << 16)
            if not data:
                break
            message = json.loads(data)
            if "exit" in message:
                self.exits.append((int(message["exit"]), int(message["code"])))
        exits, self.exits = self.exits, []
        return exits


def select_readable(sock: socket.socket, timeout: float) -> bool:
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        return bool(sel.select(timeout))


TASK_DIR = "/run/rebench-task"
TASK_SOCKET = TASK_DIR + "/task.sock"
TASK_REQUEST_LIMIT = 65536
TASK_REPLY_LIMIT = 60000
"""Bytes of a task reply's output written back (the client's socket buffer holds it whole)."""
TASK_READ_S = 10.0
"""How long a `task` client may take to send its request."""
TASK_CLIENTS = 32
FROZEN_FLAG = "/run/rebench/frozen"
"""Keep-alive mode: present (listing the uids) while a command holds users frozen, so the SSH
gate starts no new session for them meanwhile (a root sshd would otherwise start one)."""


class TaskClient:
    """One connection of the `task` command on the task socket."""

    def __init__(self, conn: socket.socket, pid: int, uid: int) -> None:
        self.conn = conn
        self.pid = pid
        self.uid = uid
        self.buf = bytearray()
        self.opened = time.monotonic()
        self.number = 0


def _peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process on the other end of a Unix socket, from the kernel."""
    data = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", data)
    return pid, uid, gid


def _listen_unix(path: str, mode: int) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, mode)
    sock.listen(16)
    sock.setblocking(False)
    return sock


class Server:
    def __init__(self, infd: int | None, outfd: int | None, *, listen: str | None = None, attempt: str = "",
                 spawner: Spawner | None = None) -> None:
        self.spawner = spawner
        self.infd = infd
        self.outfd = outfd
        self.attempt = attempt
        self.generation = 0
        self.harness: socket.socket | None = None
        self.listener: socket.socket | None = None
        self.task_listener: socket.socket | None = None
        self.task_clients: dict[int, TaskClient] = {}
        self.task_waiting: dict[int, TaskClient] = {}
        self.task_counter = 0
        self.sel = selectors.DefaultSelector()
        self.inbuf = bytearray()
        self.jobs: dict[int, Job] = {}
        self.by_pid: dict[int, Job] = {}
        self.users: dict[str, tuple[int, int, str]] = {}
        self.groups: dict[str, int] = {}
        self.base_env = dict(os.environ)
        self.counter = 0
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._terminate)
        if self.infd is not None:
            self.sel.register(self.infd, selectors.EVENT_READ, ("in", None))
        if self.spawner is not None:
            self.sel.register(self.spawner.sock, selectors.EVENT_READ, ("spawner", None))
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))
        if listen is not None:
            self._listen(listen)

    # -- keep-alive mode ---------------------------------------------------
    def _listen(self, path: str) -> None:
        """Close /run/rebench to everyone but root (the agent must reach none of the gate's
        sockets), then serve the harness socket and the task socket."""
        gate = os.path.dirname(path)
        parent = os.path.dirname(gate)
        os.chown(parent, 0, 0)
        os.chmod(parent, 0o700)
        # The host side runs as the gate folder's owner (not root): it must connect and clean up.
        self.listener = _listen_unix(path, 0o666)
        self.sel.register(self.listener, selectors.EVENT_READ, ("listen", None))
        self.serve_task()

    def serve_task(self) -> None:
        """Serve the `task` command's socket (keep-alive mode always; a plain attempt on the
        harness's `task_listen` op, for an agent installed in the sandbox)."""
        if self.task_listener is not None:
            return
        os.makedirs(TASK_DIR, exist_ok=True)
        os.chown(TASK_DIR, 0, 0)
        os.chmod(TASK_DIR, 0o755)
        self.task_listener = _listen_unix(TASK_SOCKET, 0o666)
        self.sel.register(self.task_listener, selectors.EVENT_READ, ("task_listen", None))

    def accept_harness(self) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        if self.harness is not None:
            self.harness_gone()  # a new harness takes over: the old one is dead or lost
        conn.setblocking(False)
        self.harness = conn
        self.infd = self.outfd = conn.fileno()
        self.inbuf.clear()
        self.generation += 1
        self.sel.register(self.infd, selectors.EVENT_READ, ("in", None))
        self.send({"id": 0, "ready": True, "pid": os.getpid()})

    def harness_gone(self) -> None:
        """The harness's connection closed: kill its commands (finish() thaws what they froze),
        tell waiting `task` clients, and wait for the next harness."""
        if self.infd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.infd)
        if self.harness is not None:
            with contextlib.suppress(OSError):
                self.harness.close()
        self.harness = None
        self.infd = self.outfd = None
        self.inbuf.clear()
        for job in list(self.jobs.values()):
            if job.generation == self.generation and not job.killed:
                job.killed = True
                kill_tree(job.proc.pid, job.marker)
        for client in list(self.task_waiting.values()):
            self.task_answer(client, 3, self._attach_hint("the harness disconnected"))

    def _attach_hint(self, why: str) -> str:
        return (f"task: {why}; the operator must run `rebench human attach {self.attempt or 'ID'}` "
                "and then you can run the command again\n")

    def accept_task(self) -> None:
        assert self.task_listener is not None
        try:
            conn, _ = self.task_listener.accept()
        except BlockingIOError:
            return
        try:
            pid, uid, _gid = _peer_credentials(conn)
            agent = self._user("agent")[0]
        except (OSError, KeyError):
            conn.close()
            return
        client = TaskClient(conn, pid, uid)
        if uid != agent:
            self.task_answer(client, 126, f"task: refused: only the agent user may use this command (uid {uid})\n")
            return
        if len(self.task_clients) >= TASK_CLIENTS:
            self.task_answer(client, 1, "task: too many task commands at once; try again\n")
            return
        conn.setblocking(False)
        self.task_clients[conn.fileno()] = client
        self.sel.register(conn, selectors.EVENT_READ, ("task_client", client))

    def read_task(self, client: TaskClient) -> None:
        try:
            data = client.conn.recv(TASK_REQUEST_LIMIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        client.buf += data
        line, newline, _ = bytes(client.buf).partition(b"\n")
        if not newline and data and len(client.buf) <= TASK_REQUEST_LIMIT:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(client.conn)
        self.task_clients.pop(client.conn.fileno(), None)
        if len(line) > TASK_REQUEST_LIMIT:
            self.task_answer(client, 2, f"task: the request is over {TASK_REQUEST_LIMIT} bytes; "
                                        "shorten the arguments\n")
            return
        try:  # the agent's bytes: whatever they are (deep nesting raises RecursionError), one line back
            request = json.loads(line)
            command = str(request["command"])
            args = [str(a) for a in request.get("args") or []]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            self.task_answer(client, 2, 'task: bad request: one line of JSON, {"command": "...", "args": [...]}\n')
            return
        if self.outfd is None:
            self.task_answer(client, 3, self._attach_hint("the harness is not connected"))
            return
        self.task_counter += 1
        client.number = self.task_counter
        self.task_waiting[client.number] = client
        self.send({"id": None, "event": "task", "task": client.number, "command": command, "args": args,
                   "uid": client.uid, "pid": client.pid})

    def task_answer(self, client: TaskClient, exit_code: int, output: str) -> None:
        """Write the reply line and close; a client that went away (or is frozen with a full buffer) misses it."""
        self.task_waiting.pop(client.number, None)
        data = output.encode("utf-8", errors="replace")
        if len(data) > TASK_REPLY_LIMIT:
            data = data[: TASK_REPLY_LIMIT] + b"\n[output cut]\n"
        line = json.dumps({"exit_code": exit_code, "output": data.decode("utf-8", errors="replace")}) + "\n"
        with contextlib.suppress(OSError):
            client.conn.setblocking(True)
            client.conn.settimeout(0.5)
            client.conn.sendall(line.encode())
        with contextlib.suppress(OSError):
            client.conn.close()

    def expire_tasks(self) -> None:
        now = time.monotonic()
        for client in list(self.task_clients.values()):
            if now - client.opened > TASK_READ_S:
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(client.conn)
                self.task_clients.pop(client.conn.fileno(), None)
                self.task_answer(client, 2, "task: no request arrived\n")

    def frozen_uids(self) -> set[int]:
        return {uid for job in self.jobs.values() for uid in job.frozen_uids}

    def _terminate(self, *_: object) -> None:
        for job in list(self.jobs.values()):
            kill_tree(job.proc.pid, job.marker)
        sys.exit(0)

    # -- replies -----------------------------------------------------------
    def send(self, payload: dict) -> None:
        if self.outfd is None:
            return  # keep-alive mode with no harness: the reply has nobody to go to
        data = json.dumps(payload, separators=(",", ":")).encode()
        frame = HEADER.pack(len(data)) + data
        view = memoryview(frame)
        while view:
            try:
                written = os.write(self.outfd, view)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            except OSError:
                if self.listener is None:
                    raise
                self.harness_gone()
                return
            view = view[written:]

    # -- requests ----------------------------------------------------------
    def handle(self, request: dict) -> None:
        op = request.get("op")
        if op == "ping":
            ids: dict[str, object] = {}
            for name in request.get("users", []):
                try:
                    ids[name] = list(self._user(name)[:2])
                except KeyError:
                    ids[name] = None
            for name in request.get("groups", []):
                try:
                    ids["group:" + name] = self._group(name)
                except KeyError:
                    ids["group:" + name] = None
            self.send(
                {
                    "id": request["id"],
                    "ok": True,
                    "pid": os.getpid(),
                    "ids": ids,
                    "python": sys.version.split()[0],
                    "spawner": self.spawner.pid if self.spawner is not None else None,
                    "spawner_placed": bool(self.spawner and self.spawner.placed),
                }
            )
        elif op == "exec":
            self.start_job(request)
        elif op == "agent_cgroup":
            # The harness moved the spawner into the agent's cgroup (it checked that from the host).
            ok = self.spawner is not None and int(request.get("spawner", -1)) == self.spawner.pid
            if ok and self.spawner is not None:
                self.spawner.placed = True
            self.send({"id": request["id"], "ok": ok})
        elif op == "kill":
            job = self.jobs.get(request.get("target", -1))
            if job is not None and not job.killed:
                job.killed = True
                kill_tree(job.proc.pid, job.marker)
            self.send({"id": request["id"], "ok": job is not None})
        elif op == "task_listen":
            self.serve_task()
            self.send({"id": request["id"], "ok": True})
        elif op == "task_reply":
            client = self.task_waiting.get(int(request.get("task", -1)))
            if client is not None:
                self.task_answer(client, int(request.get("exit_code", 1)), str(request.get("output", "")))
            self.send({"id": request["id"], "ok": client is not None})
        elif op == "kill_user":
            uid = self._user(request["user"])[0]
            killed = kill_matching(lambda entry: os.stat(f"/proc/{entry}").st_uid == uid)
            self.send({"id": request["id"], "ok": True, "killed": killed})
        else:
            self.send({"id": request.get("id"), "error": f"unknown op {op!r}"})

    def _user(self, name: str) -> tuple[int, int, str]:
        if name not in self.users:
            entry = pwd.getpwnam(name)
            self.users[name] = (entry.pw_uid, entry.pw_gid, entry.pw_dir)
        return self.users[name]

    def _group(self, name: str) -> int:
        if name not in self.groups:
            self.groups[name] = grp.getgrnam(name).gr_gid
        return self.groups[name]

    def start_job(self, request: dict) -> None:
        self.counter += 1
        began = time.monotonic()
        marker = f"{os.getpid()}-{self.counter}"
        try:
            uid, gid, home = self._user(request.get("user", "root"))
            groups = [self._group(g) for g in request.get("groups", [])]
            name = request.get("user", "root")
            env = dict(self.base_env)
            env.update({"HOME": home, "USER": name, "LOGNAME": name})
            env.update(request.get("env") or {})
            env[MARKER_VAR] = marker
            agent_side = name == "agent" or bool(request.get("agent_side"))
            if uid in self.frozen_uids() or (agent_side and self.frozen_uids()):
                raise PermissionError(f"user {name} is paused while a score call runs")
            if agent_side and (self.spawner is None or not self.spawner.placed):
                raise PermissionError("the agent's cgroup is not set up yet (the harness has not placed the spawner)")
            frozen = {self._user(u)[0] for u in request.get("frozen_users") or []}
            caps = [str(c) for c in request.get("caps") or []]
            if caps and not SETPRIV:
                raise OSError("capabilities for a command need setpriv in the image")
            stdin = request.get("stdin")
            cwd = request.get("cwd") or home
            if request.get("cwd_fallback") and not os.path.isdir(cwd):
                cwd = home if os.path.isdir(home) else "/"
            argv = list(request["argv"])
            switch: dict = {}
            if uid != os.getuid():
                if SETPRIV:
                    # Switching user inside Popen forces fork() (~4 ms here); exec'ing
                    # setpriv keeps the fast vfork path.
                    keep = ",".join(["-all", *(f"+{c}" for c in caps)])
                    argv = [
                        SETPRIV,
                        f"--reuid={uid}",
                        f"--regid={gid}",
                        "--groups=" + ",".join(str(g) for g in [gid, *groups]),
                        *([f"--inh-caps={keep}", f"--ambient-caps={keep}", f"--bounding-set={keep}"] if caps else []),
                        "--",
                        *argv,
                    ]
                else:
                    switch = {"user": uid, "group": gid, "extra_groups": [gid, *groups]}
            if frozen:
                self._flag_frozen(frozen)
        except (OSError, KeyError, subprocess.SubprocessError) as exc:
            self._flag_frozen()
            self._refuse(request, exc)
            return
        try:
            for owner in frozen:
                share_read([str(p) for p in request.get("share_read") or []], owner)
                close_to_others([str(p) for p in request.get("close_to_others") or []], owner)
            proc: subprocess.Popen | RemoteProc
            if agent_side:
                assert self.spawner is not None
                proc = self.spawner.spawn(argv, cwd=cwd, env=env, switch=switch, stdin=stdin is not None)
            else:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                    # Every fd this server opens is non-inheritable; closing them all one
                    # by one up to the fd limit would cost milliseconds per command.
                    close_fds=False,
                    **switch,
                )
        except (OSError, KeyError, subprocess.SubprocessError) as exc:
            self._flag_frozen()
            self._refuse(request, exc)
            return
        job = Job(request, proc, marker)
        job.frozen_uids = frozen
        job.generation = self.generation
        job.spawn_s = job.started - began
        self.jobs[job.id] = job
        self.by_pid[proc.pid] = job
        for stream, capture in ((proc.stdout, job.out), (proc.stderr, job.err)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self.sel.register(stream.fileno(), selectors.EVENT_READ, ("pipe", (job, stream, capture)))
            job.open_pipes += 1
        if stdin is not None:
            assert proc.stdin is not None
            job.stdin_data = base64.b64decode(stdin)
            os.set_blocking(proc.stdin.fileno(), False)
            self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, ("stdin", job))

    def _flag_frozen(self, extra: set[int] | None = None) -> None:
        if self.listener is None:
            return
        uids = self.frozen_uids() | (extra or set())
        with contextlib.suppress(OSError):
            if uids:
                with open(FROZEN_FLAG, "w", encoding="utf-8") as handle:
                    handle.write(" ".join(str(u) for u in sorted(uids)))
            else:
                os.unlink(FROZEN_FLAG)

    def _refuse(self, request: dict, exc: Exception) -> None:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        message = f"rebench: cannot start command: {type(exc).__name__}: {exc}\n".encode()
        self.send(
            {
                "id": request["id"],
                "exit_code": code,
                "timed_out": False,
                "duration_s": 0.0,
                "stdout": Capture(1).result(),
                "stderr": {"head": base64.b64encode(message).decode(), "tail": "", "dropped": 0},
            }
        )

    def finish(self, job: Job) -> None:
        for name in job.reap_groups:
            with contextlib.suppress(KeyError):
                kill_group_members(self._group(name))
        reaped = set()
        for name in job.reap_users:
            with contextlib.suppress(KeyError):
                reaped.add(self._user(name)[0])
        if reaped:
            kill_matching(lambda entry: bool(reaped & _process_uids(entry)))
        for sweep in job.sweep:
            with contextlib.suppress(KeyError):
                sweep_owned([str(d) for d in sweep.get("dirs") or []], self._user(str(sweep["user"]))[0])
        for stream in (job.proc.stdout, job.proc.stderr, job.proc.stdin):
            if stream is not None and not stream.closed:
                with contextlib.suppress(KeyError, ValueError):
                    self.sel.unregister(stream.fileno())
                stream.close()
        self.jobs.pop(job.id, None)
        self.by_pid.pop(job.proc.pid, None)
        if job.frozen_uids:
            self._flag_frozen()
        if job.generation != self.generation:
            return  # its harness is gone; the reply's id would mean another request now
        self.send(
            {
                "id": job.id,
                "exit_code": None if job.timed_out else job.exit_code,
                "timed_out": job.timed_out,
                "killed": job.killed,
                "spawn_s": job.spawn_s,
                "duration_s": time.monotonic() - job.started,
                "stdout": job.out.result(),
                "stderr": job.err.result(),
            }
        )

    # -- loop --------------------------------------------------------------
    def reap(self) -> None:
        """Collect exited children: ours through Popen, orphans directly, and the spawner's
        commands from its exit messages."""
        if self.spawner is not None:
            try:
                exits = self.spawner.take_exits()
            except OSError:
                exits = []
            for pid, code in exits:
                job = self.by_pid.get(pid)
                if job is not None and isinstance(job.proc, RemoteProc):
                    job.proc.returncode = code
                    job.exit_code = 128 - code if code < 0 else code
                    job.exited_at = time.monotonic()
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            job = self.by_pid.get(info.si_pid)
            if job is not None and not isinstance(job.proc, RemoteProc):
                job.proc.wait()
                job.exit_code = job.proc.returncode
                if job.exit_code is not None and job.exit_code < 0:
                    job.exit_code = 128 - job.exit_code
                job.exited_at = time.monotonic()
            else:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(info.si_pid, 0)

    def read_requests(self) -> bool:
        if self.infd is None:
            return True
        try:
            data = os.read(self.infd, READ_CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            return False
        self.inbuf += data
        generation = self.generation
        while len(self.inbuf) >= 4 and generation == self.generation:
            (size,) = HEADER.unpack_from(self.inbuf)
            if len(self.inbuf) < 4 + size:
                break
            body = bytes(self.inbuf[4 : 4 + size])
            del self.inbuf[: 4 + size]
            try:
                request = json.loads(body)
            except ValueError:
                self.send({"id": None, "error": "bad frame"})
                continue
            try:
                self.handle(request)
            except Exception as exc:  # a bad request must not take the sandbox down
                self.send({"id": request.get("id"), "error": f"{type(exc).__name__}: {exc}"})
        return True

    def run(self) -> int:
        if self.infd is not None:
            os.set_blocking(self.infd, False)
        stdin_open = self.infd is not None
        while stdin_open or self.jobs or self.listener is not None:
            now = time.monotonic()
            waits = [1.0]
            for job in self.jobs.values():
                if job.deadline is not None and not job.timed_out:
                    waits.append(job.deadline - now)
                if job.exited_at is not None:
                    waits.append(job.exited_at + EXIT_GRACE_S - now)
            for key, _mask in self.sel.select(max(0.0, min(waits))):
                kind, data = key.data
                if kind in ("listen", "task_listen", "task_client"):
                    try:
                        if kind == "listen":
                            self.accept_harness()
                        elif kind == "task_listen":
                            self.accept_task()
                        else:
                            self.read_task(data)
                    except Exception as exc:  # PID 1 of a human attempt: an error here must not end it
                        print(f"rebench exec server: {kind}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                        if kind == "task_client":  # nor leave the connection open in PID 1 for good
                            self.task_clients.pop(data.conn.fileno(), None)
                            with contextlib.suppress(KeyError, ValueError, OSError):
                                self.sel.unregister(data.conn)
                                data.conn.close()
                elif kind == "in" and self.listener is not None:
                    if not self.read_requests():
                        self.harness_gone()
                elif kind == "in":
                    if not self.read_requests():
                        stdin_open = False
                        self.sel.unregister(key.fd)
                        for job in list(self.jobs.values()):
                            job.killed = True
                            kill_tree(job.proc.pid, job.marker)
                elif kind == "spawner":
                    pass  # its exit messages are read by reap() below
                elif kind == "wake":
                    try:
                        while os.read(self.wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif kind == "pipe":
                    job, stream, capture = data
                    try:
                        chunk = os.read(stream.fileno(), READ_CHUNK)
                    except BlockingIOError:
                        continue
                    if chunk:
                        capture.add(chunk)
                    else:
                        self.sel.unregister(stream.fileno())
                        stream.close()
                        job.open_pipes -= 1
                elif kind == "stdin":
                    job = data
                    assert job.proc.stdin is not None
                    try:
                        written = os.write(job.proc.stdin.fileno(), job.stdin_data[:READ_CHUNK])
                        job.stdin_data = job.stdin_data[written:]
                    except BlockingIOError:
                        continue
                    except OSError:
                        job.stdin_data = b""
                    if not job.stdin_data:
                        self.sel.unregister(job.proc.stdin.fileno())
                        job.proc.stdin.close()
            self.reap()
            if self.task_clients:
                self.expire_tasks()
            now = time.monotonic()
            for job in list(self.jobs.values()):
                if (
                    job.deadline is not None
                    and now >= job.deadline
                    and not job.timed_out
                    and job.exited_at is None
                ):
                    job.timed_out = True
                    kill_tree(job.proc.pid, job.marker)
                if job.exited_at is not None and (job.open_pipes == 0 or now >= job.exited_at + EXIT_GRACE_S):
                    self.finish(job)
        return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--listen":
        # Keep-alive mode: diagnostics go to a file in the gate folder (the container has no log).
        attempt = argv[3] if len(argv) >= 4 and argv[2] == "--attempt" else ""
        gate = os.stat(os.path.dirname(argv[1]))
        log = os.open(os.path.join(os.path.dirname(argv[1]), "exec-server.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        with contextlib.suppress(OSError):  # the host's harness user owns the gate folder and cleans it up
            os.fchown(log, gate.st_uid, gate.st_gid)
        os.dup2(log, 2)
        os.close(log)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        return Server(None, None, listen=argv[1], attempt=attempt, spawner=Spawner()).run()
    spawner = Spawner()
    server = Server(sys.stdin.fileno(), sys.stdout.fileno(), spawner=spawner)
    server.send({"id": 0, "ready": True, "pid": os.getpid()})
    return server.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
