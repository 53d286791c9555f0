"""`--network full` on Docker: the agent reaches the outside world, and nothing of the host's.

From attempt A's shell (as the agent) the test tries: a service on the host listening on every
address (a stand-in for the engine's API on TCP, a human attempt's SSH relay started with
`--bind 0.0.0.0`, or anything else running there), through the bridge's gateway and every other
IPv4 address of the host; a port another container published on the host, through the host's
addresses and that container's own; a listener of attempt B (also `full`), on B's address; the
host over IPv6. While a score call runs, the submitted code (the scorer's command here) tries the
outside world, where it could leave what the scorer shows it for the agent to fetch later. The
outside world is a service beyond the host (tests/network_support.py), which the agent reaches.

Seen before the defence, with Docker's shared bridge (what the old `network=True` gave): the
host service answered on every address and B's listener answered A. Positive controls show each
target listens: the host reaches its own service, B reaches its own listener on its address,
and the published port answers the host.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.docker_support import base_image, docker_engine, run, started_sandbox
from tests.network_support import outside_service

pytestmark = [pytest.mark.adversarial, pytest.mark.docker, pytest.mark.slow]
PROBE = r"""
import json, socket, sys
def gateway():
    for line in open('/proc/net/route').read().splitlines()[1:]:
        fields = line.split()
        if fields[1] == '00000000':
            return socket.inet_ntoa(bytes.fromhex(fields[2])[::-1])
out = {}
targets = [(gateway(), int(sys.argv[1]))] + [(t.rsplit(':', 1)[0], int(t.rsplit(':', 1)[1])) for t in sys.argv[2:]]
for host, port in targets:
    try:
        conn = socket.create_connection((host, port), timeout=4)
    except OSError as exc:
        out[f'{host}:{port}'] = type(exc).__name__
        continue
    conn.settimeout(1)
    try:
        said = conn.recv(40).decode(errors='replace').strip()
    except OSError:
        said = ''
    out[f'{host}:{port}'] = ('REACHED ' + said).strip()
    conn.close()
out['ipv6'] = open('/proc/net/if_inet6').read().split()
print(json.dumps(out))
"""
LISTEN = r"""
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(('0.0.0.0', int(sys.argv[1])))
server.listen(8)
while True:
    conn, _ = server.accept()
    conn.sendall(sys.argv[2].encode() + b'\n')
    conn.close()
"""


def _host_ipv4() -> list[str]:
    """Every IPv4 address of this host but loopback (SIOCGIFADDR on each interface)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            address = socket.inet_ntoa(packed[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


def _reaches(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.fixture
def host_service() -> Iterator[int]:
    """A service on the host on every address, IPv4 and IPv6, that names itself."""
    server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    server.bind(("::", 0))
    server.listen(16)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HOST-SERVICE\n")

    threading.Thread(target=serve, daemon=True).start()
    yield int(server.getsockname()[1])
    server.close()


@pytest.fixture
def published(image: str) -> Iterator[tuple[str, int]]:
    """Another container (not an attempt) with a port published on the host: (its address, the port)."""
    engine = docker_engine()
    with socket.socket() as free:
        free.bind(("0.0.0.0", 0))
        port = int(free.getsockname()[1])
    container = engine.client.containers.run(
        image, ["python3", "-c", LISTEN, str(port), "PUBLISHED"], detach=True, user="1000",
        ports={f"{port}/tcp": port}, labels={"rebench.test": "network-full"})
    try:
        container.reload()
        address = next(iter(container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
        for _ in range(50):
            if _reaches("127.0.0.1", port):
                break
            time.sleep(0.1)
        yield address, port
    finally:
        container.remove(force=True)


@pytest.fixture
def outside() -> Iterator[tuple[str, int]]:
    with outside_service() as address:
        yield address


@pytest.fixture(scope="module")
def image() -> str:
    return base_image(docker_engine())


def _address(sandbox: Any) -> str:
    info = docker_engine().client.api.inspect_container(sandbox.container_id)
    return str(next(iter(info["NetworkSettings"]["Networks"].values()))["IPAddress"])


def test_full_network_reaches_out_but_not_the_host_nor_other_attempts(
        image: str, host_service: int, published: tuple[str, int], outside: tuple[str, int]) -> None:
    other_port = 4242
    published_address, published_port = published
    far = f"{outside[0]}:{outside[1]}"
    host_addresses = _host_ipv4()  # the outside service's link address on the host among them
    assert host_addresses and _reaches(host_addresses[0], host_service)  # the service answers the host

    async def body() -> dict[str, Any]:
        async with started_sandbox(image, network="full") as b, started_sandbox(image, network="full") as a:
            await b.write_file("/tmp/listen.py", LISTEN.encode(), user="root", mode=0o644)
            await b.exec(f"nohup python3 /tmp/listen.py {other_port} ATTEMPT-B >/dev/null 2>&1 &")
            b_address = _address(b)
            await a.write_file("/tmp/probe.py", PROBE.encode(), user="root", mode=0o644)
            await asyncio.sleep(0.5)
            control = await b.exec(f"python3 -c \"import socket; c = socket.create_connection(('{b_address}', "
                                   f"{other_port}), timeout=4); print(c.recv(40).decode().strip())\"")
            targets = [f"{h}:{host_service}" for h in host_addresses]
            targets += [f"{h}:{published_port}" for h in host_addresses] + [f"{published_address}:{published_port}"]
            targets += [f"{b_address}:{other_port}", far]
            agent = await a.exec(["python3", "/tmp/probe.py", str(host_service), *targets], timeout=120)
            scoring = await a.exec(["python3", "/tmp/probe.py", str(host_service), far], user="scorer", timeout=60)
            after = await a.exec(["python3", "/tmp/probe.py", str(host_service), far], timeout=60)
            return {"control": control.stdout.strip(), "agent": agent, "scoring": scoring, "after": after,
                    "b": b_address}

    out = run(body())
    assert out["control"] == "ATTEMPT-B", out["control"]  # B's listener is up on B's address
    seen = json.loads(out["agent"].stdout)
    reached = {target: result for target, result in seen.items() if str(result).startswith("REACHED")}
    assert reached.pop(far, None) == "REACHED OUTSIDE", seen
    assert reached == {}, reached
    assert seen["ipv6"] == [], seen["ipv6"]  # no IPv6 address from which to reach the host's link-local one
    assert not json.loads(out["scoring"].stdout)[far].startswith("REACHED"), out["scoring"].stdout
    assert json.loads(out["after"].stdout)[far] == "REACHED OUTSIDE", out["after"].stdout
