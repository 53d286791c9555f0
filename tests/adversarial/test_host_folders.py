"""Host folders mounted into a Docker sandbox are writable only where they must be.

The gateway folder (`/tmp/rbgw-*`, at /run/rebench/gateway) holds only the Unix socket that the
root forwarder inside connects to: it is mounted read-only, so even root in the container (an
agent that became root) cannot plant a file on the host there, and the forwarder still reaches
the socket (connecting to a Unix socket works through a read-only bind mount)."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest

from tests.docker_support import base_image, docker_engine, run, started_sandbox

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]

PORT = 4141
ASK = f"""
import socket
with socket.create_connection(("127.0.0.1", {PORT}), timeout=10) as conn:
    conn.sendall(b"ping")
    conn.shutdown(socket.SHUT_WR)
    print(conn.recv(100).decode())
"""


def _echo_server(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"echo:" + conn.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_the_gateway_folder_is_read_only_inside_and_its_socket_still_answers() -> None:
    image = base_image(docker_engine())
    folder = Path(tempfile.mkdtemp(prefix="rbgw-"))
    sock_path = folder / "gateway.sock"
    server = _echo_server(sock_path)

    async def body() -> tuple[str, str]:
        async with started_sandbox(image, gateway_socket=str(sock_path), gateway_port=PORT) as sb:
            planted = await sb.exec("touch /run/rebench/gateway/planted 2>&1; "
                                    "mkdir /run/rebench/gateway/d 2>&1; rm -f /run/rebench/gateway/gateway.sock 2>&1",
                                    user="root")
            asked = await sb.exec(["python3", "-c", ASK], user="root")
            return planted.stdout, asked.stdout.strip()

    try:
        planted, asked = run(body())
    finally:
        server.close()
        left = sorted(p.name for p in folder.iterdir())
        shutil.rmtree(folder, ignore_errors=True)
    assert planted.count("Read-only file system") == 3, planted
    assert asked == "echo:ping"
    assert left == ["gateway.sock"], left
