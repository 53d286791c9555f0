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
import socket
import sys
import threading

CHUNK = 65536


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


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError as exc:
        body = json.dumps({"error": {"message": f"the model gateway is not reachable: {exc}",
                                     "type": "gateway_down"}}).encode()
        head = f"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        with contextlib.suppress(OSError):
            client.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(argv: list[str]) -> int:
    port, path, ready = int(argv[0]), argv[1], argv[2]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    with open(ready, "w") as handle:
        handle.write(str(os.getpid()))
    while True:
        try:
            client, _ = listener.accept()
        except InterruptedError:
            continue
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
