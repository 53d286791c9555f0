#!/usr/bin/python3 -I
"""sshd's ForceCommand in a human attempt's container; runs as the agent (stdlib only).

It hands this session's stdin/stdout/stderr to the root gate (SCM_RIGHTS over
/run/rebench-ssh/session.sock), which runs the shell, command or sftp server as the
agent and records the session; this process only forwards window size changes and exits
with the command's status. It holds nothing the agent could not do itself; it exists so
that the recording is made by a process the agent does not control.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import sys
import termios
import tty

SESSION_SOCKET = "/run/rebench-ssh/session.sock"


def _size(fd: int) -> tuple[int, int]:
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        return 24, 80
    return rows or 24, cols or 80


def main() -> int:
    with contextlib.suppress(OSError, AttributeError):  # not dumpable: the expert's uid cannot trace this process
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    is_tty = os.isatty(0)
    if is_tty:  # raw at once: the session's own pty (in the gate) echoes and edits, not this one
        with contextlib.suppress(termios.error):
            tty.setraw(0, termios.TCSANOW)
    rows, cols = _size(0) if is_tty else (24, 80)
    header = {"command": os.environ.get("SSH_ORIGINAL_COMMAND"), "tty": is_tty,
              "term": os.environ.get("TERM", "xterm"), "rows": rows, "cols": cols}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(SESSION_SOCKET)
    except OSError as exc:
        print(f"rebench: the session recorder does not answer ({exc}); no session without it", file=sys.stderr)
        return 255
    socket.send_fds(sock, [json.dumps(header).encode() + b"\n"], [0, 1, 2])
    # From now on only the gate holds the session's streams (the terminal too: it reads the window
    # size itself), so no program of the expert's can reach them through this process; its end is
    # the session's end.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    if is_tty:
        def resized(*_: object) -> None:
            with contextlib.suppress(OSError):
                sock.sendall(b'{"winch": true}\n')

        signal.signal(signal.SIGWINCH, resized)
    buf = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return 255
        buf += chunk
        if b"\n" in buf:
            reply = json.loads(buf.split(b"\n", 1)[0])
            return int(reply.get("exit", 255))


if __name__ == "__main__":
    sys.exit(main())
