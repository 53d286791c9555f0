"""A Ray cluster made the way a user makes one: `ray start --head` and `ray start --address` processes
on this machine (each node in a session of its own, so a test can kill a node whole), under a home
folder of the test's own that holds the cluster's token (`ray get-auth-token --generate`, as Ray's
documentation has a user do). The Ray tests of the scale work use it too."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 90.0
NODE_DEATH_TIMEOUT_S = 5
"""A worker node that lost its head gives up after this many seconds (Ray's default is 60)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ports() -> list[str]:
    """The ports a node would otherwise take at fixed defaults, which a second node here would clash on."""
    return ["--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
            "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port())]


def session_pids(sid: int) -> list[int]:
    """The processes of session `sid`, read from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # after the name: state, ppid, pgrp, session
                pids.append(int(stat.parent.name))
    return pids


class Node:
    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log

    def kill(self) -> None:
        """SIGKILL to the node's whole session (the `ray start` process, its GCS, raylet and workers):
        Ray's workers run in process groups of their own, so a signal to the group missed them and
        they went on (and cleaned up) for seconds after the node was gone."""
        for _ in range(3):  # a process forked meanwhile is caught on the next pass
            for pid in session_pids(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None


class RayStartCluster:
    """A head (no CPUs for tasks) and worker nodes, all `ray start --block` processes."""

    def __init__(self, home: Path, *, token: bool = True) -> None:
        self.home = home
        self.home.mkdir(parents=True, exist_ok=True)
        # Ray's session folders hold unix sockets, whose paths must stay short
        self.temp = Path(tempfile.mkdtemp(prefix="rbray-", dir="/tmp"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[Node] = []
        if token:
            subprocess.run([RAY, "get-auth-token", "--generate"], env=self.env(), check=True,
                           capture_output=True, timeout=60)

    def env(self, **extra: str) -> dict[str, str]:
        """The user's shell: this test's home (the token's folder) and no Ray settings of the caller."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        return {**env, "HOME": str(self.home), **extra}

    def _start(self, args: list[str], env: dict[str, str], name: str) -> Node:
        log = self.temp / f"{name}.log"
        with log.open("w") as out:
            proc = subprocess.Popen([RAY, "start", "--block", "--temp-dir", str(self.temp), *_ports(), *args],
                                    env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        node = Node(proc, log)
        self.nodes.append(node)
        return node

    def start_head(self) -> Node:
        node = self._start(["--head", "--port", str(self.port), "--num-cpus", "0", "--include-dashboard", "false",
                            "--object-store-memory", str(80 * 1024**2)], self.env(), "head")
        self._wait_for(1)
        return node

    def add_worker(self, cpus: int = 2, **extra: str) -> Node:
        """A worker node as Ray documents it under token authentication (RAY_AUTH_MODE=token on the node);
        it gives up on a lost head after NODE_DEATH_TIMEOUT_S. `extra`: the node's own settings
        (REBENCH_CACHE, say)."""
        env = self.env(RAY_AUTH_MODE="token",
                       RAY_gcs_rpc_server_reconnect_timeout_s=str(NODE_DEATH_TIMEOUT_S), **extra)
        node = self._start(["--address", self.address, "--num-cpus", str(cpus),
                            "--object-store-memory", str(80 * 1024**2)], env, f"worker{len(self.nodes)}")
        self._wait_for(sum(1 for n in self.nodes if n.alive()))
        return node

    def _wait_for(self, count: int) -> None:
        """Until `ray status` on the head counts `count` nodes."""
        deadline = time.monotonic() + START_TIMEOUT_S
        env = self.env(RAY_AUTH_MODE="token")
        while True:
            done = subprocess.run([RAY, "status", "--address", self.address], env=env, capture_output=True,
                                  text=True, timeout=60)
            alive = done.stdout.count(" node_")
            if done.returncode == 0 and alive >= count:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(node.log.read_text()[-1500:] for node in self.nodes)
                raise RuntimeError(f"the Ray cluster did not reach {count} nodes: {done.stdout[-800:]} "
                                   f"{done.stderr[-800:]}\n{logs}")
            time.sleep(1.0)

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        self.nodes.clear()


@contextlib.contextmanager
def ray_start_cluster(home: Path, workers: int = 1) -> Iterator[RayStartCluster]:
    cluster = RayStartCluster(home)
    try:
        cluster.start_head()
        for _ in range(workers):
            cluster.add_worker()
        yield cluster
    finally:
        cluster.stop()
