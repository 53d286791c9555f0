"""A TCP service "outside" the host for the `--network full` tests, with no internet needed: it
listens in a network namespace of its own, reached through a veth pair and the host's routing,
as a machine beyond the host would be (not on any of the host's own addresses, which an attempt
must not reach). Needs root and iproute2 (`ip netns`), as the Docker tests' host already has."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

SERVE = r"""
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(16)
while True:
    conn, _ = server.accept()
    conn.sendall(b"OUTSIDE\n")
    conn.close()
"""
PORT = 8443


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@contextmanager
def outside_service() -> Iterator[tuple[str, int]]:
    """(address, port) of a service that answers `OUTSIDE`, beyond the host (198.18.0.0/15, the
    benchmarking range, a fresh /30 each time)."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root and iproute2 (`ip netns`) for a service outside the host")
    tag = os.urandom(3).hex()
    namespace, near, far = f"rbtest-{tag}", f"rbh{tag}", f"rbo{tag}"
    block = int(tag[:4], 16) % 16384 * 4  # a /30 inside 198.18.0.0/16
    near_ip = f"198.18.{block // 256}.{block % 256 + 1}"
    far_ip = f"198.18.{block // 256}.{block % 256 + 2}"
    server: subprocess.Popen[bytes] | None = None
    try:
        _ip("netns", "add", namespace)
        _ip("link", "add", near, "type", "veth", "peer", "name", far)
        _ip("link", "set", far, "netns", namespace)
        _ip("addr", "add", f"{near_ip}/30", "dev", near)
        _ip("link", "set", near, "up")
        for step in (["addr", "add", f"{far_ip}/30", "dev", far], ["link", "set", far, "up"],
                     ["link", "set", "lo", "up"], ["route", "add", "default", "via", near_ip]):
            _ip("netns", "exec", namespace, "ip", *step)
        server = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c", SERVE, far_ip, str(PORT)])
        for _ in range(100):
            try:
                socket.create_connection((far_ip, PORT), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"the outside service on {far_ip}:{PORT} did not start")
        yield far_ip, PORT
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", near], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
