"""The `docker` backend's sandbox: one container per attempt (see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

import docker.errors

from rebench.errors import RebenchError, SandboxDied, SandboxError, SandboxStartError
from rebench.network import NetworkPolicy
from rebench.sandbox.base import SandboxPaths, SandboxSpec
from rebench.sandbox.channel import ExecChannel
from rebench.sandbox.docker.cgroups import AgentCgroup, CgroupError
from rebench.sandbox.docker.commands import SUBJECT_USER
from rebench.sandbox.docker.container import (
    AGENT_GATEWAY_MOUNT,
    CONNECT_S,
    FORWARDER_SOURCE,
    FORWARDER_START,
    GATEWAY_MOUNT,
    HARNESS_SOCKET,
    SERVER_SOURCE,
    SOCKET_PATH_MAX,
    container_labels,
    create_container,
)
from rebench.sandbox.docker.disk import LABEL_DISK, SETUP, AgentDisk
from rebench.sandbox.docker.engine import DockerEngine
from rebench.sandbox.docker.files import ContainerFiles
from rebench.sandbox.docker.network import AttemptNetwork
from rebench.sandbox.docker.task_socket import TaskSocket
from rebench.sandbox.docker.tasks import TaskHandler

DISK_POLL_S = 5.0
DEFAULT_DISK_LIMIT_GB = 50.0
"""What an attempt may write into its container (overlay2 on ext4 cannot enforce a quota,
so the harness polls the writable layer's size); `REBENCH_DISK_LIMIT_GB` overrides."""


class DockerSandbox(TaskSocket):
    """One attempt's container. Create with a spec naming the environment image."""

    backend = "docker"

    def __init__(
        self,
        spec: SandboxSpec,
        *,
        engine: DockerEngine | None = None,
        shm_gb: float | None = None,
    ) -> None:
        if not spec.image:
            raise SandboxStartError(
                f"no image for attempt {spec.attempt_id}; run `rebench envs build {spec.environment}`"
            )
        self.spec = spec
        self.paths = SandboxPaths()
        self._engine = engine
        self._network: AttemptNetwork | None = None
        """The attempt's own network under `--network full` (rebench.sandbox.docker.network)."""
        self._shm_bytes = int((shm_gb if shm_gb is not None else max(0.5, spec.memory_gb / 2)) * 1024**3)
        self._container: Any = None
        self._channel: ExecChannel | None = None
        self._files: ContainerFiles | None = None
        self.container_id: str | None = None
        self.start_to_ready_s: float | None = None
        limit_gb = float(os.environ.get("REBENCH_DISK_LIMIT_GB") or DEFAULT_DISK_LIMIT_GB)
        self.disk_limit_bytes = int(limit_gb * 1024**3)
        self.breach: str | None = None
        """Set when the agent broke a limit the engine cannot enforce (disk); its commands then fail."""
        self._disk_watch: asyncio.Task[None] | None = None
        self._disk: AgentDisk | None = None
        """The agent's home and /tmp, a file system of `disk_limit_bytes` (rebench/sandbox/docker/disk.py)."""
        if spec.keep_alive and spec.network != NetworkPolicy.NONE:
            raise SandboxStartError(f"a keep-alive sandbox (attempt {spec.attempt_id}) has no network: "
                                    f"--network {spec.network} is for `rebench run` only")
        if spec.keep_alive and not spec.gate_dir:
            raise SandboxStartError(f"a keep-alive sandbox (attempt {spec.attempt_id}) needs a gate_dir")
        if spec.gate_dir and len(os.fsencode(Path(spec.gate_dir).resolve() / HARNESS_SOCKET)) > SOCKET_PATH_MAX:
            raise SandboxStartError(
                f"gate folder {spec.gate_dir} is too long a path for its Unix sockets (at most "
                f"{SOCKET_PATH_MAX - len(HARNESS_SOCKET) - 1} bytes); use tempfile.mkdtemp(prefix='rbh-')"
            )
        self.task_handler: TaskHandler | None = None
        """Answers `task` requests from inside a keep-alive container (set by the harness)."""
        self._task_jobs: set[asyncio.Task[None]] = set()
        self._cgroup: AgentCgroup | None = None
        self._inspected: asyncio.Task[Any] | None = None
        self._spawner_host_pid: int | None = None
        self._agent_uid = 1000

    @property
    def gate_dir(self) -> Path:
        """The host folder mounted at /run/rebench/gate (keep-alive sandboxes only)."""
        if not self.spec.gate_dir:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} has no gate folder")
        return Path(self.spec.gate_dir)

    # -- lifecycle -----------------------------------------------------------
    @property
    def engine(self) -> DockerEngine:
        if self._engine is None:
            self._engine = DockerEngine.connect()
        return self._engine

    async def start(self) -> None:
        started = time.perf_counter()
        try:
            if self.spec.network == NetworkPolicy.FULL:
                self._network = await asyncio.to_thread(AttemptNetwork.create, self.engine.client,
                                                        self.spec.attempt_id, container_labels(self.spec))
            self._disk = await asyncio.to_thread(AgentDisk.create, self.disk_limit_bytes, self.spec.attempt_id)
            self._container = await asyncio.to_thread(
                create_container, self.engine, self.spec, network=self._network, shm_bytes=self._shm_bytes,
                gate_dir=self.gate_dir if self.spec.keep_alive else None, disk=self._disk)
            self.container_id = str(self._container.id)
            raw = None
            if not self.spec.keep_alive:
                sock = await asyncio.to_thread(
                    self._container.attach_socket, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
                raw = getattr(sock, "_sock", sock)
            await asyncio.to_thread(self._container.start)
            # The container's host pid (for its cgroup) is asked for while its exec server starts.
            self._inspected = asyncio.create_task(
                asyncio.to_thread(self.engine.client.api.inspect_container, self.container_id))
            if raw is None:
                raw = await self._connect_gate()
        except SandboxDied as exc:
            await self.stop()
            raise SandboxStartError(f"could not start a container for attempt {self.spec.attempt_id}: {exc}") from None
        except docker.errors.DockerException as exc:
            await self.stop()
            raise SandboxStartError(
                f"could not start a container for attempt {self.spec.attempt_id}: {exc}"
            ) from None
        except BaseException:
            await self.stop()
            raise
        try:
            await self._open_channel(raw, bootstrap=not self.spec.keep_alive, set_up_disk=True)
            if self.spec.gateway_socket:
                await self._start_forwarder(self.spec.gateway_port, GATEWAY_MOUNT, self.spec.gateway_socket)
            if self.spec.agent_gateway_socket:
                await self._start_forwarder(self.spec.agent_gateway_port, AGENT_GATEWAY_MOUNT,
                                            self.spec.agent_gateway_socket)
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, SandboxError | TimeoutError):
                raise SandboxStartError(
                    f"container for attempt {self.spec.attempt_id} failed its health check: {exc}"
                ) from None
            raise
        self.start_to_ready_s = time.perf_counter() - started

    async def _start_forwarder(self, port: int | None, mount: str, host_socket: str) -> None:
        """Start a root forwarder from 127.0.0.1:port to a gateway's socket (forwarder.py)."""
        if port is None:
            raise SandboxError(f"attempt {self.spec.attempt_id}: a gateway socket needs a port")
        result = await self.exec(["sh", "-c", FORWARDER_START, "forwarder", str(port),
                                  f"{mount}/{Path(host_socket).name}"],
                                 user="root", cwd="/", timeout=30, stdin=FORWARDER_SOURCE)
        if not result.ok:
            raise SandboxError(f"the gateway forwarder did not start: {(result.stdout + result.stderr).strip()}")

    async def _connect_gate(self) -> socket.socket:
        """Connect to a keep-alive container's exec server on gate_dir/harness.sock (waiting for it to listen)."""
        path = str(self.gate_dir / HARNESS_SOCKET)
        deadline = time.monotonic() + CONNECT_S
        tries = 0
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                return sock
            except OSError as exc:
                sock.close()
                tries += 1
                # Every second: has the container stopped (the server failed)? Then say so at once.
                stopped = tries % 20 == 0 and not await asyncio.to_thread(self._running)
                if stopped or time.monotonic() > deadline:
                    log = self.gate_dir / "exec-server.log"
                    said = log.read_text(errors="replace")[-500:].strip() if log.is_file() else ""
                    raise SandboxDied(
                        f"exec server of attempt {self.spec.attempt_id} does not answer on {path} ({exc}"
                        + ("; its container stopped" if stopped else "") + ")"
                        + (f": {said}" if said else "")
                    ) from None
            await asyncio.sleep(0.05)

    def _running(self) -> bool:
        try:
            self._container.reload()
        except docker.errors.DockerException:
            return False
        return bool(self._container.status == "running")

    async def _set_up_disk(self) -> None:
        made = await self.exec(["sh", "-c", SETUP], user="root", cwd="/", timeout=60)
        if not made.ok:
            raise SandboxError(f"the agent's disk was not set up: {(made.stdout + made.stderr).strip()}")

    async def _open_channel(self, raw: socket.socket, *, bootstrap: bool, set_up_disk: bool = False) -> None:
        """Open the exec channel, check the server's health and the image's users; place the agent's
        cgroup while (on a fresh start) root sets up the agent's disk, which needs no agent process."""
        self._channel = ExecChannel(raw, multiplexed=bootstrap)
        self._channel.on_event = self._on_event
        source = str(len(SERVER_SOURCE)).encode() + b"\n" + SERVER_SOURCE if bootstrap else b""
        await self._channel.open(source)
        async with asyncio.timeout(10):
            health = await self._channel.request(
                {"op": "ping", "users": ["agent", "root", "scorer", SUBJECT_USER], "groups": ["protected"]}
            )
        ids = health.get("ids", {})
        missing = [name for name in ("agent", "scorer", SUBJECT_USER) if not ids.get(name)]
        if missing:
            raise SandboxStartError(
                f"image {self.spec.image} has no user {', '.join(missing)}; rebuild it from the current "
                f"rebench base image (`rebench envs build {self.spec.environment} --backend docker`)"
            )
        self._files = ContainerFiles(self._container, self.paths, ids, self.spec.attempt_id, self._make_folder,
                                     self._run)
        self._agent_uid = int(ids["agent"][0])
        steps = [self._setup_cgroup(health), *([self._set_up_disk()] if set_up_disk else [])]
        for outcome in await asyncio.gather(*steps, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
        self._disk_watch = asyncio.create_task(self._watch_disk())

    async def _setup_cgroup(self, health: dict[str, Any]) -> None:
        """Put the exec server's spawner, and so every agent-side process, into the agent's
        cgroup (rebench/sandbox/docker/cgroups.py), checked from the host; a reattaching harness
        finds it placed and thaws it (its predecessor may have died during a score call)."""
        spawner = health.get("spawner")
        if not isinstance(spawner, int):
            raise SandboxStartError(f"the exec server of attempt {self.spec.attempt_id} has no spawner")
        inspected, self._inspected = self._inspected, None
        info = await (inspected if inspected is not None else
                      asyncio.to_thread(self.engine.client.api.inspect_container, self.container_id))
        try:
            cgroup = await asyncio.to_thread(AgentCgroup.of_process, int(info["State"]["Pid"]))
            await asyncio.to_thread(cgroup.create, self.spec.max_processes)
            if not health.get("spawner_placed"):
                await asyncio.to_thread(cgroup.place, spawner)
            else:
                await asyncio.to_thread(cgroup.thaw)
            host = await asyncio.to_thread(cgroup.host_pid_of, spawner)
        except CgroupError as exc:
            raise SandboxStartError(f"attempt {self.spec.attempt_id}: {exc}") from None
        if host is None:
            raise SandboxStartError(
                f"attempt {self.spec.attempt_id}: the spawner (pid {spawner}) is not in the agent's cgroup")
        self._cgroup, self._spawner_host_pid = cgroup, host
        async with asyncio.timeout(10):
            reply = await self._require_channel().request({"op": "agent_cgroup", "spawner": spawner})
        if not reply.get("ok"):
            raise SandboxStartError(f"attempt {self.spec.attempt_id}: the exec server refused the agent's cgroup")

    @classmethod
    async def reattach(
        cls, spec: SandboxSpec, container_id: str, *, engine: DockerEngine | None = None
    ) -> DockerSandbox:
        """Connect again to a running keep-alive container (its harness died or detached);
        SandboxDied if it is gone. A failure here never removes the container."""
        sandbox = cls(spec, engine=engine)
        if not spec.keep_alive:
            raise SandboxError(f"attempt {spec.attempt_id}: only a keep-alive sandbox can be reattached")
        try:
            container = await asyncio.to_thread(sandbox.engine.client.containers.get, container_id)
        except docker.errors.NotFound:
            raise SandboxDied(f"container {container_id[:12]} of attempt {spec.attempt_id} is gone") from None
        except docker.errors.DockerException as exc:
            raise SandboxDied(
                f"cannot inspect container {container_id[:12]} of attempt {spec.attempt_id}: {exc}"
            ) from None
        if container.status != "running":
            raise SandboxDied(
                f"container {container_id[:12]} of attempt {spec.attempt_id} is not running ({container.status})"
            )
        sandbox._container = container
        sandbox.container_id = str(container.id)
        disk = (container.labels or {}).get(LABEL_DISK)
        sandbox._disk = AgentDisk(Path(disk)) if disk else None
        started = time.perf_counter()
        raw = await sandbox._connect_gate()
        try:
            await sandbox._open_channel(raw, bootstrap=False)
        except BaseException:
            await sandbox.detach()
            raise
        sandbox.start_to_ready_s = time.perf_counter() - started
        return sandbox

    async def detach(self) -> None:
        """Close the channel only: the container, the expert's sessions and their processes keep
        running (the server kills only the commands this harness had in flight)."""
        if self._disk_watch is not None:
            self._disk_watch.cancel()
            self._disk_watch = None
        for job in list(self._task_jobs):
            job.cancel()
        if self._channel is not None:
            await self._channel.close()

    def _written_bytes(self) -> int:
        found = self.engine.client.api.containers(all=True, size=True, filters={"id": self.container_id})
        if not found:
            raise SandboxDied(f"container of attempt {self.spec.attempt_id} is gone")
        return int(found[0].get("SizeRw") or 0)

    async def _watch_disk(self) -> None:
        """Poll the container's writable layer and the agent's disk; past the limit, or with the
        disk full (bytes or inodes), kill the agent's processes and refuse its further commands
        (the attempt ends as a `disk` limit)."""
        while True:
            await asyncio.sleep(DISK_POLL_S)
            try:
                written = await asyncio.to_thread(self._written_bytes)
            except Exception:
                return  # the container is gone; exec reports that
            full = self._disk.full() if self._disk is not None else None
            if full is not None:
                self.breach = f"the agent used up {full}, the {self.disk_limit_bytes / 1024**3:g} GB disk limit"
            elif written > self.disk_limit_bytes:
                self.breach = (f"the attempt wrote {written / 1024**3:.2f} GB into its container, "
                               f"over the {self.disk_limit_bytes / 1024**3:g} GB disk limit")
            if self.breach is not None:
                with contextlib.suppress(Exception):
                    await self.kill_agent_processes()
                return

    async def kill_agent_processes(self) -> int:
        """Kill every process in the agent's cgroup (a fork bomb too: frozen, killed, thawed, from the
        host) but the spawner, leaving the container usable (re-scoring after the agent ends)."""
        cgroup = self._cgroup
        if cgroup is None:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} is not started")
        keep = frozenset({self._spawner_host_pid} if self._spawner_host_pid is not None else set())
        try:
            return await asyncio.to_thread(cgroup.kill_all, keep)
        except CgroupError as exc:
            raise SandboxError(f"attempt {self.spec.attempt_id}: {exc}") from None

    async def cpu_seconds(self) -> float | None:
        """CPU time used so far by everything in the container, from the engine's accounting
        (outside the expert's reach); None when the engine does not say."""
        if self.container_id is None:
            return None
        try:
            stats = await asyncio.to_thread(self.engine.client.api.stats, self.container_id, stream=False,
                                            one_shot=True)
            return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
        except (docker.errors.DockerException, KeyError, TypeError, ValueError):
            return None

    async def alive(self) -> bool:
        if self._channel is None or not self._channel.is_open or self._container is None:
            return False
        try:
            await asyncio.to_thread(self._container.reload)
        except docker.errors.DockerException:
            return False
        return bool(self._container.status == "running")

    async def stop(self) -> None:
        for task in (self._disk_watch, self._inspected):
            if task is not None:
                task.cancel()
        for job in list(self._task_jobs):
            job.cancel()
        if self._channel is not None:
            await self._channel.close()
        if self.container_id is not None:
            with contextlib.suppress(SandboxError, docker.errors.DockerException):
                await asyncio.to_thread(self.engine.remove_container, self.container_id)
        if self._network is not None:  # after its container: an attached network cannot be removed
            await asyncio.to_thread(self._network.remove)
            self._network = None
        if self._cgroup is not None:
            await asyncio.to_thread(self._cgroup.remove)
            self._cgroup = None
        if self._disk is not None:  # after its container: unmounted lazily, gone with the last user
            await asyncio.to_thread(self._disk.release)
            self._disk = None
        self._container = None


def create_sandbox(spec: SandboxSpec, env: object = None) -> DockerSandbox:
    """The factory's entry: the attempt runs in `spec.image`, which rebench.sandboxes resolves to the
    environment's current image (built by `rebench envs build ENV --profile P --backend docker`)."""
    if spec.image is None:
        raise RebenchError(f"no image for environment {spec.environment!r} ({spec.profile}): "
                           "create Docker sandboxes through rebench.sandboxes.create_sandbox")
    return DockerSandbox(spec, engine=DockerEngine.connect())
