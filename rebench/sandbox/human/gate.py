#!/usr/bin/python3 -I
"""rebench SSH gate: runs as root inside a human attempt's container (stdlib only).

Copied into the container by `rebench.sandbox.docker.ssh.open_ssh` and started detached
(it outlives the harness). Two Unix sockets:

- /run/rebench/gate/ssh.sock (root-only folder; the host relays TCP connections here):
  each connection is handed to its own `sshd -i` as stdin/stdout.
- /run/rebench-ssh/session.sock: sshd's ForceCommand (session.py, running as the agent)
  passes the session's stdin/stdout/stderr here (SCM_RIGHTS). Only a process of the agent's
  uid that descends from one of our sshd processes is served. The gate then runs the session
  (relay.py, copied beside this file: the command as the agent, its bytes relayed and recorded
  as root) and writes an open and a close line into /run/rebench/gate/sessions.jsonl. The
  command's exit status goes back to the wrapper, which exits with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import socket
import struct
import subprocess
import sys
import threading

if __package__:  # imported as rebench.sandbox.human.gate (tests, type checks)
    from rebench.sandbox.human.relay import CHUNK, GATE, Session
else:  # run as a script: relay.py lies beside it, in the same root-owned folder; loaded by its path,
    # as python3 -I leaves that folder off sys.path (and this process, root's, adds nothing to it)
    import importlib.util

    _spec = importlib.util.spec_from_file_location("relay", os.path.join(os.path.dirname(__file__), "relay.py"))
    assert _spec is not None and _spec.loader is not None
    _relay = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_relay)
    CHUNK, GATE, Session = _relay.CHUNK, _relay.GATE, _relay.Session  # type: ignore[misc]

SSH_SOCKET = GATE + "/ssh.sock"
SESSIONS = GATE + "/sessions.jsonl"
SESSION_DIR = "/run/rebench-ssh"
SESSION_SOCKET = SESSION_DIR + "/session.sock"
CONFIG = "/etc/rebench-ssh/sshd_config"
PID_FILE = "/etc/rebench-ssh/gate.pid"
USER = "agent"


def _owner() -> tuple[int, int]:
    """The host user who owns the gate folder: what the gate writes there must be theirs to clean up."""
    info = os.stat(GATE)
    return info.st_uid, info.st_gid


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return 0
    return int(data[data.rfind(b")") + 2 :].split()[1])


class Gate:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sshd: set[int] = set()
        self.sessions: set[int] = set()  # process groups of running session commands
        self.active: dict[int, Session] = {}
        self.agent = pwd.getpwnam(USER)
        self.owner = _owner()
        self.number = self._last_session()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("REBENCH_EXEC")}

    def _last_session(self) -> int:
        last = 0
        with contextlib.suppress(OSError), open(SESSIONS, encoding="utf-8") as handle:
            for line in handle:
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    last = max(last, int(json.loads(line).get("session", 0)))
        return last

    def own(self, path: str) -> None:
        with contextlib.suppress(OSError):
            os.chown(path, *self.owner)

    def log_session(self, entry: dict) -> None:
        with self.lock:
            fresh = not os.path.exists(SESSIONS)
            with open(SESSIONS, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
            if fresh:
                self.own(SESSIONS)

    # -- sshd per connection --------------------------------------------------
    def serve_ssh(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=self.run_sshd, args=(conn,), daemon=True).start()

    def run_sshd(self, conn: socket.socket) -> None:
        with conn:
            proc = subprocess.Popen(
                ["/usr/sbin/sshd", "-i", "-e", "-f", CONFIG],
                stdin=conn.fileno(), stdout=conn.fileno(), stderr=sys.stderr.fileno(),
                start_new_session=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
        with self.lock:
            self.sshd.add(proc.pid)
        proc.wait()
        with self.lock:
            self.sshd.discard(proc.pid)

    # -- sessions -------------------------------------------------------------
    def serve_sessions(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=self.session, args=(conn,), daemon=True).start()

    def _from_our_sshd(self, pid: int) -> bool:
        """Whether `pid` descends from an sshd this gate started (not any process of the agent)."""
        with self.lock:
            ours = set(self.sshd)
        for _ in range(64):
            if pid in ours:
                return True
            if pid <= 1:
                return False
            pid = _ppid(pid)
        return False

    def session(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != self.agent.pw_uid or not self._from_our_sshd(pid):
                conn.sendall(json.dumps({"exit": 126, "error": "not an SSH session of this sandbox"}).encode() + b"\n")
                return
            data, fds, _, _ = socket.recv_fds(conn, CHUNK, 3)
            while not data.endswith(b"\n"):
                more = conn.recv(CHUNK)
                if not more or len(data) > CHUNK:
                    return
                data += more
            if len(fds) != 3:
                return
            header = json.loads(data)
            status = Session(self, conn, header, fds).run()
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"exit": status}).encode() + b"\n")
        except Exception as exc:  # one broken session must not take the gate down
            print(f"rebench gate: session failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            conn.close()

    def stop(self, *_: object) -> None:
        """SIGTERM (close_ssh): end every connection and session, then exit."""
        with self.lock:
            groups = set(self.sshd) | set(self.sessions)
            active = list(self.active.values())
        for group in groups:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        for session in active:  # their threads die with this process: close their lines here
            with contextlib.suppress(OSError):
                self.log_session(session.entry("close"))
        with contextlib.suppress(OSError):
            os.unlink(SSH_SOCKET)
        os._exit(0)


def _listen(path: str, mode: int) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, mode)
    sock.listen(32)
    return sock


def main() -> int:
    os.umask(0o022)
    gate = Gate()
    os.makedirs(SESSION_DIR, exist_ok=True)
    os.chmod(SESSION_DIR, 0o755)
    sessions = _listen(SESSION_SOCKET, 0o666)  # the agent's wrapper connects; checked per connection
    ssh = _listen(SSH_SOCKET, 0o666)  # in a root-only folder: only the host reaches it
    with open(PID_FILE, "w", encoding="utf-8") as handle:
        handle.write(str(os.getpid()))
    signal.signal(signal.SIGTERM, gate.stop)
    threading.Thread(target=gate.serve_sessions, args=(sessions,), daemon=True).start()
    gate.serve_ssh(ssh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
