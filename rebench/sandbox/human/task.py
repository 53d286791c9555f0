#!/usr/bin/python3 -I
"""`task CMD ARGS...` inside a human attempt's container (stdlib only).

It sends the command to the root-owned socket /run/rebench-task/task.sock, served by the
sandbox's exec server, which checks who is calling and asks the harness; it prints the
harness's answer and exits with its status. It holds no secret: everything it can do is
decided by the harness (`task help` lists the commands).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys

TASK_SOCKET = "/run/rebench-task/task.sock"
REQUEST_LIMIT = 65536
"""The most bytes of one request the exec server reads (its TASK_REQUEST_LIMIT)."""


def main(argv: list[str]) -> int:
    request = {"command": argv[0] if argv else "", "args": argv[1:]}
    line = json.dumps(request).encode()
    if len(line) > REQUEST_LIMIT:
        print(f"task: the command is {len(line)} bytes long as sent; at most {REQUEST_LIMIT} are allowed "
              "(shorten its arguments)", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(TASK_SOCKET)
    except OSError as exc:
        print(f"task: the task service is not running in this sandbox ({exc})", file=sys.stderr)
        return 3
    with contextlib.suppress(OSError):  # a refusal may come (and the socket close) before we finish sending
        sock.sendall(line + b"\n")
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    try:
        reply = json.loads(data)
    except ValueError:
        print("task: no answer (the harness went away); try again", file=sys.stderr)
        return 3
    sys.stdout.write(str(reply.get("output", "")))
    sys.stdout.flush()
    return int(reply.get("exit_code", 1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
