#!/usr/bin/python3 -I
"""rebench gateway forwarder: runs as root inside an attempt's container (stdlib only).

The container has no network. The harness serves the attempt's model gateway (rebench.gateway)
on a Unix socket in a host folder mounted at /run/rebench/gateway, inside /run/rebench, which is
root-only: no process of the agent can open the socket, read it or replace it. This forwarder
listens on 127.0.0.1:PORT and relays each TCP connection to that socket, byte for byte, so code
in the sandbox (the agent's, and the scorer's, which does not go through any process of the
agent) reaches the gateway at http://127.0.0.1:PORT/v1 with its own token.

    python3 -I forwarder.py PORT SOCKET READY_FILE
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import sys
import threading

CHUNK = 65536
PER_USER = 64
"""Connections one user may hold open at once: the agent cannot use up the forwarder's threads (and the
container's process limit) and so cut the scorer, a different user, off the gateway."""
_open: dict[int | None, int] = {}
_lock = threading.Lock()


def _peer_uid(client: socket.socket) -> int | None:
    """The uid owning the other end of a loopback connection (from /proc/net/tcp); None if unknown."""
    port = f":{client.getpeername()[1]:04X}"
    try:
        with open("/proc/net/tcp") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                if fields[1].endswith(port) and fields[1].startswith("0100007F"):
                    return int(fields[7])
    except (OSError, IndexError, ValueError):
        pass
    return None


def _refuse(client: socket.socket, status: str, message: str) -> None:
    """Answer with an HTTP error and close. The request is read first (briefly): closing a socket
    with unread data resets it, and the client would see a broken pipe instead of the answer."""
    body = json.dumps({"error": {"message": message, "type": "gateway_forwarder"}}).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with contextlib.suppress(OSError):
        client.settimeout(0.5)
        with contextlib.suppress(OSError):
            client.recv(CHUNK)
        client.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        client.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            while client.recv(CHUNK):
                pass
    client.close()


_refusals: queue.Queue[tuple[socket.socket, str, str]] = queue.Queue()


def _refuser() -> None:
    """One thread answers every refused connection, so refusing costs no thread per connection."""
    while True:
        _refuse(*_refusals.get())


def _pipe(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
        with contextlib.suppress(OSError):
            sock.shutdown(how)


def _relay(client: socket.socket, path: str, uid: int | None) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
        back.start()
        _pipe(client, upstream)
        back.join()
    except (OSError, RuntimeError) as exc:
        _refuse(client, "502 Bad Gateway", f"the model gateway is not reachable: {exc}")
    finally:
        client.close()
        upstream.close()
        with _lock:
            _open[uid] -= 1


def _accept(client: socket.socket, path: str) -> None:
    uid = _peer_uid(client)
    with _lock:
        if _open.get(uid, 0) >= PER_USER:
            full = True
        else:
            full = False
            _open[uid] = _open.get(uid, 0) + 1
    if full:
        _refusals.put((client, "503 Service Unavailable",
                       f"too many open connections to the gateway (at most {PER_USER})"))
        return
    try:
        threading.Thread(target=_relay, args=(client, path, uid), daemon=True).start()
    except RuntimeError:  # no thread left (the container's process limit): this connection only
        with _lock:
            _open[uid] -= 1
        _refusals.put((client, "503 Service Unavailable", "the gateway forwarder is out of threads"))


def main(argv: list[str]) -> int:
    port, path, ready = int(argv[0]), argv[1], argv[2]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    threading.Thread(target=_refuser, daemon=True).start()
    with open(ready, "w") as handle:
        handle.write(str(os.getpid()))
    while True:
        try:
            client, _ = listener.accept()
        except InterruptedError:
            continue
        _accept(client, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
