"""One SSH session as the gate (gate.py) serves it, as root inside a human attempt's container (stdlib
only): the shell or command started as the agent (a new pty for pty sessions), its bytes relayed between
the expert's connection and the command, and recorded into GATE/casts/session-N.cast (asciinema v2);
sftp sessions are relayed and counted, not recorded. Copied beside gate.py, which imports it.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import json
import os
import pwd
import select
import shutil
import signal
import socket
import struct
import subprocess
import termios
import threading
import time
import tty
from typing import Protocol, TextIO

GATE = "/run/rebench/gate"
CASTS = GATE + "/casts"
FROZEN_FLAG = "/run/rebench/frozen"
"""Written by the exec server while a score call holds the agent frozen: no session starts then."""
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
SFTP_NAMES = ("internal-sftp", "sftp-server", SFTP_SERVER)
CAST_LIMIT = 64 * 1024 * 1024
"""Bytes of events one cast may hold; past it the session is still counted, no longer recorded."""
CHUNK = 65536
EXIT_DRAIN_S = 0.3
"""After a pty session's command exits, how long output still pending on the pty is read."""


class GateState(Protocol):
    """What a session uses of the gate that serves it (gate.Gate)."""

    lock: threading.Lock
    number: int
    active: dict[int, Session]
    sessions: set[int]
    agent: pwd.struct_passwd
    env: dict[str, str]

    def own(self, path: str) -> None: ...

    def log_session(self, entry: dict) -> None: ...


def _read(fd: int) -> bytes:
    """One chunk from `fd`; b"" at its end or when it failed (the peer is gone either way)."""
    try:
        return os.read(fd, CHUNK)
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return False
        view = view[written:]
    return True


class Session:
    """One SSH session: the command as the agent, relayed and recorded by root."""

    def __init__(self, gate: GateState, conn: socket.socket, header: dict, fds: list[int]) -> None:
        self.gate = gate
        self.conn = conn
        self.fds = fds
        command = header.get("command")
        self.command = str(command) if command else None
        first = (self.command or "").split()[:1]
        if first and os.path.basename(first[0]) in SFTP_NAMES:
            self.mode = "sftp"
        elif header.get("tty"):
            self.mode = "pty"
        else:
            self.mode = "exec"
        self.term = str(header.get("term") or "xterm")
        self.rows = int(header.get("rows") or 24)
        self.cols = int(header.get("cols") or 80)
        self.bytes_in = 0
        self.bytes_out = 0
        self.cast: TextIO | None = None
        self.cast_bytes = 0
        self.started = time.monotonic()
        self.cast_lock = threading.Lock()
        self.decoders = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in ("i", "o")}
        with gate.lock:
            gate.number += 1
            self.number = gate.number
        self.recording = f"casts/session-{self.number}.cast"
        self.proc: subprocess.Popen | None = None
        self.master: int | None = None

    # -- recording ------------------------------------------------------------
    def record(self, kind: str, data: bytes) -> None:
        if self.cast is None or self.cast_bytes > CAST_LIMIT:
            return
        text = self.decoders[kind].decode(data)
        if not text:
            return
        line = json.dumps([round(time.monotonic() - self.started, 6), kind, text]) + "\n"
        with self.cast_lock:
            self.cast_bytes += len(line)
            self.cast.write(line)
            self.cast.flush()

    def entry(self, event: str) -> dict:
        return {"session": self.number, "event": event, "mode": self.mode, "command": self.command,
                "recording": None if self.mode == "sftp" else self.recording, "time": time.time(),
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out}

    def _open_cast(self) -> None:
        if self.mode == "sftp":
            return
        os.makedirs(CASTS, exist_ok=True)
        self.gate.own(CASTS)
        path = os.path.join(GATE, self.recording)
        self.cast = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in run()
        self.gate.own(path)
        header = {"version": 2, "width": self.cols, "height": self.rows, "timestamp": int(time.time()),
                  "title": self.command or "login shell", "env": {"TERM": self.term, "SHELL": self.shell}}
        self.cast.write(json.dumps(header) + "\n")
        self.cast.flush()

    # -- the command ----------------------------------------------------------
    @property
    def shell(self) -> str:
        return self.gate.agent.pw_shell or "/bin/bash"

    def argv(self) -> list[str]:
        agent = self.gate.agent
        groups = os.getgrouplist(agent.pw_name, agent.pw_gid)
        switch = [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={agent.pw_uid}",
                  f"--regid={agent.pw_gid}", "--groups=" + ",".join(str(g) for g in groups), "--"]
        if self.mode == "sftp":
            return [*switch, SFTP_SERVER]
        command = [self.shell, "-c", self.command] if self.command else [self.shell, "-l"]
        if self.mode == "pty":  # a session of its own with the new pty as its controlling terminal
            return [*switch, "setsid", "-w", "-c", *command]
        return [*switch, *command]

    def environment(self) -> dict[str, str]:
        agent = self.gate.agent
        env = dict(self.gate.env)
        env.update({"HOME": agent.pw_dir, "USER": agent.pw_name, "LOGNAME": agent.pw_name, "SHELL": self.shell,
                    "REBENCH_SSH_SESSION": str(self.number)})
        if self.mode == "pty":
            env["TERM"] = self.term
        return env

    def run(self) -> int:
        while os.path.exists(FROZEN_FLAG):  # a score call runs: the new session waits for its end
            time.sleep(0.05)
        self._open_cast()
        self.gate.log_session(self.entry("open"))
        with self.gate.lock:
            self.gate.active[self.number] = self
        status = 255
        try:
            status = self._run_pty() if self.mode == "pty" else self._run_pipes()
        finally:
            if self.cast is not None:
                self.cast.close()
            with self.gate.lock:
                self.gate.active.pop(self.number, None)
            self.gate.log_session(self.entry("close"))
        return status

    def _watch_wrapper(self) -> None:
        """Window size changes come from the wrapper; its end (killed, or the client gone) ends the session."""
        buf = b""
        while True:
            try:
                chunk = self.conn.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                self._kill(signal.SIGHUP)
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                with contextlib.suppress(ValueError, TypeError, OSError, KeyError):
                    json.loads(line)["winch"]  # the wrapper saw SIGWINCH; the size is read here, from the terminal
                    rows, cols = struct.unpack("HHHH", fcntl.ioctl(self.fds[0], termios.TIOCGWINSZ, b"\0" * 8))[:2]
                    if self.master is not None:
                        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _kill(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
            if sig != signal.SIGKILL:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGCONT)

    def _spawn(self, **streams: object) -> subprocess.Popen:
        proc = subprocess.Popen(self.argv(), env=self.environment(), cwd=self.gate.agent.pw_dir, **streams)  # type: ignore[call-overload]
        with self.gate.lock:
            self.gate.sessions.add(proc.pid)
        return proc

    def _done(self, proc: subprocess.Popen) -> int:
        code = proc.wait()
        with self.gate.lock:
            self.gate.sessions.discard(proc.pid)
        return 128 - code if code < 0 else code

    def _run_pty(self) -> int:
        outer_in, outer_out, _ = self.fds
        master, slave = os.openpty()
        self.master = master
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", self.rows, self.cols, 0, 0))
        saved = None
        with contextlib.suppress(termios.error):
            saved = termios.tcgetattr(outer_in)
            tty.setraw(outer_in, termios.TCSANOW)  # the inner pty edits and echoes; keep typed-ahead input
        with contextlib.suppress(OSError):
            # sshd made the outer terminal the agent's: a program of the expert's could open it and read
            # keystrokes or write output past this recorder. Only root may open it now.
            os.fchown(outer_in, 0, 0)
            os.fchmod(outer_in, 0o600)
        try:
            self.proc = self._spawn(stdin=slave, stdout=slave, stderr=slave)
            os.close(slave)
            threading.Thread(target=self._watch_wrapper, daemon=True).start()
            threading.Thread(target=self._pty_input, args=(outer_in, master), daemon=True).start()
            exited_at = None
            while True:
                ready, _, _ = select.select([master], [], [], 0.2)
                if ready:
                    data = _read(master)
                    if not data:
                        break
                    self.bytes_out += len(data)
                    self.record("o", data)
                    _write_all(outer_out, data)
                    continue
                if self.proc.poll() is not None:  # a background child may keep the pty open: stop soon
                    exited_at = exited_at or time.monotonic()
                    if time.monotonic() - exited_at > EXIT_DRAIN_S:
                        break
            return self._done(self.proc)
        finally:
            if saved is not None:
                with contextlib.suppress(termios.error, OSError):
                    termios.tcsetattr(outer_in, termios.TCSADRAIN, saved)
            self.master = None
            os.close(master)

    def _pty_input(self, outer_in: int, master: int) -> None:
        while True:
            data = _read(outer_in)
            if not data:
                self._kill(signal.SIGHUP)  # the client hung up
                return
            self.bytes_in += len(data)
            self.record("i", data)
            if not _write_all(master, data):
                return

    def _run_pipes(self) -> int:
        outer_in, outer_out, outer_err = self.fds
        self.proc = self._spawn(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        threading.Thread(target=self._watch_wrapper, daemon=True).start()
        threading.Thread(target=self._pipe_input, args=(outer_in, self.proc.stdin), daemon=True).start()
        readers = [threading.Thread(target=self._pipe_output, args=(stream, fd), daemon=True)
                   for stream, fd in ((self.proc.stdout, outer_out), (self.proc.stderr, outer_err))]
        for reader in readers:
            reader.start()
        status = self._done(self.proc)
        for reader in readers:  # a background child may hold the pipes: do not wait for it long
            reader.join(timeout=1.0)
        return status

    def _pipe_input(self, outer_in: int, stdin: object) -> None:
        fd = stdin.fileno()  # type: ignore[attr-defined]
        while True:
            data = _read(outer_in)
            if not data or not _write_all(fd, data):
                break
            self.bytes_in += len(data)
            if self.mode != "sftp":
                self.record("i", data)
        with contextlib.suppress(OSError):
            stdin.close()  # type: ignore[attr-defined]

    def _pipe_output(self, stream: object, fd: int) -> None:
        source = stream.fileno()  # type: ignore[attr-defined]
        while True:
            data = _read(source)
            if not data:
                return
            self.bytes_out += len(data)
            if self.mode != "sftp":
                self.record("o", data)
            if not _write_all(fd, data):  # the client is gone: the command's next write fails, as over sshd
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[attr-defined]
                return
