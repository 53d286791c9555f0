"""The `docker` backend's sandbox: one container per attempt (see the package's docstring)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import docker.errors
from docker.types import DeviceRequest, LogConfig

from rebench.errors import LimitExceeded, RebenchError, SandboxDied, SandboxError, SandboxStartError
from rebench.network import NetworkPolicy
from rebench.sandbox.base import ExecResult, SandboxPaths, SandboxSpec, User
from rebench.sandbox.channel import ExecChannel, decode_capture
from rebench.sandbox.docker.cgroups import AgentCgroup, CgroupError
from rebench.sandbox.docker.engine import (
    LABEL_ATTEMPT,
    LABEL_CAMPAIGN,
    LABEL_HUMAN,
    LABEL_OWNER,
    DockerEngine,
    owner_token,
)
from rebench.sandbox.docker.files import ContainerFiles, in_solution
from rebench.sandbox.docker.network import AttemptNetwork
from rebench.sandbox.docker.tasks import NO_HARNESS_EXIT, TaskHandler, TaskReply, TaskRequest, attach_hint
from rebench.sandbox.output import OUTPUT_LIMIT_BYTES
from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport

_SERVER_SOURCE = (Path(__file__).parents[1] / "exec_server.py").read_bytes()
_FORWARDER_SOURCE = (Path(__file__).with_name("forwarder.py")).read_bytes()
_TASK_CLIENT_SOURCE = (Path(__file__).parents[1] / "human" / "task.py").read_bytes()
TASK_CLIENT = "/usr/local/bin/task"
_LOADER = (
    "import sys;b=sys.stdin.buffer;n=int(b.readline());"
    "exec(compile(b.read(n),'rebench-exec-server','exec'),{'__name__':'__main__'})"
)
_USERS: dict[str, tuple[str, list[str]]] = {
    "agent": ("agent", []),
    "root": ("root", []),
    "scorer": ("scorer", ["protected"]),
}
SUBJECT_USER = "subject"
"""The user the submitted code runs as during scoring: it can reach neither the scorer nor the agent."""
_SCORER_REQUEST = {
    # Nothing of the agent runs beside the scorer (the harness freezes its cgroup from the host
    # first); nothing the score call started outlives it.
    "frozen_users": ["agent"],
    "reap_users": ["scorer", SUBJECT_USER],
    # Kept as ambient capabilities so the helper can switch the submitted code to `subject`.
    "caps": ["setuid", "setgid"],
}
HARNESS_PROCESSES = 256
"""Processes (threads count) the container may hold beyond the agent's own limit: the harness's
commands (scoring with its worker threads, snapshots, kills) run outside the agent's cgroup and
still start while a fork bomb of the agent fills that cgroup."""
DISK_POLL_S = 5.0
DEFAULT_DISK_LIMIT_GB = 50.0
"""What an attempt may write into its container (overlay2 on ext4 cannot enforce a quota,
so the harness polls the writable layer's size); `REBENCH_DISK_LIMIT_GB` overrides."""
_REPLY_MARGIN_S = 30.0
"""How long past a command's own timeout we wait for the server before calling the sandbox dead."""
GATE_MOUNT = "/run/rebench/gate"
"""Where a keep-alive container sees its gate folder (its parent is made root-only inside)."""
HARNESS_SOCKET = "harness.sock"
_SOCKET_PATH_MAX = 100
"""Unix socket paths must fit sockaddr_un (108 bytes on Linux); a little margin."""
_CONNECT_S = 15.0
"""How long a keep-alive container's exec server may take to open its socket."""
GATEWAY_MOUNT = "/run/rebench/gateway"
"""Where the container sees the folder of the model gateway's socket (SandboxSpec.gateway_socket);
/run/rebench is made root-only before anything of the agent runs."""
AGENT_GATEWAY_MOUNT = "/run/rebench/agent-gateway"
"""Where the container sees the folder of an installed agent's own gateway socket
(SandboxSpec.agent_gateway_socket), beside the environment's."""
_FORWARDER_START = """
set -eu
chown root:root /run/rebench && chmod 0700 /run/rebench
cat > /run/rebench/gateway-forwarder.py
rm -f /run/rebench/gateway-forwarder-"$1".ready
env -u REBENCH_EXEC_ID setsid -f /usr/bin/python3 -I /run/rebench/gateway-forwarder.py "$1" \
  "$2" /run/rebench/gateway-forwarder-"$1".ready </dev/null >/dev/null 2>>/run/rebench/gateway-forwarder.log
for _ in $(seq 200); do [ -s /run/rebench/gateway-forwarder-"$1".ready ] && exit 0; sleep 0.05; done
echo "the gateway forwarder did not start"; tail -5 /run/rebench/gateway-forwarder.log; exit 1
"""


class DockerSandbox:
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
        if spec.keep_alive and spec.network != NetworkPolicy.NONE:
            raise SandboxStartError(f"a keep-alive sandbox (attempt {spec.attempt_id}) has no network: "
                                    f"--network {spec.network} is for `rebench run` only")
        if spec.keep_alive and not spec.gate_dir:
            raise SandboxStartError(f"a keep-alive sandbox (attempt {spec.attempt_id}) needs a gate_dir")
        if spec.gate_dir and len(os.fsencode(Path(spec.gate_dir).resolve() / HARNESS_SOCKET)) > _SOCKET_PATH_MAX:
            raise SandboxStartError(
                f"gate folder {spec.gate_dir} is too long a path for its Unix sockets (at most "
                f"{_SOCKET_PATH_MAX - len(HARNESS_SOCKET) - 1} bytes); use tempfile.mkdtemp(prefix='rbh-')"
            )
        self.task_handler: TaskHandler | None = None
        """Answers `task` requests from inside a keep-alive container (set by the harness)."""
        self._task_jobs: set[asyncio.Task[None]] = set()
        self._cgroup: AgentCgroup | None = None
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

    def _labels(self) -> dict[str, str]:
        return {
            LABEL_ATTEMPT: str(self.spec.attempt_id),
            LABEL_CAMPAIGN: "" if self.spec.campaign_id is None else str(self.spec.campaign_id),
            "rebench.environment": self.spec.environment,
            "rebench.profile": self.spec.profile,
            LABEL_OWNER: owner_token(),
            **({LABEL_HUMAN: str(self.spec.attempt_id)} if self.spec.keep_alive else {}),
        }

    def _create(self) -> Any:
        spec = self.spec
        client = self.engine.client
        devices = []
        if spec.gpus:
            devices = [
                DeviceRequest(driver="nvidia", device_ids=[str(g) for g in spec.gpus], capabilities=[["gpu"]])
            ]
        memory = int(spec.memory_gb * 1024**3)
        name = f"rebench-a{spec.attempt_id}-{os.urandom(3).hex()}"
        keep = spec.keep_alive
        command = ["python3", "-I", "-c", _LOADER]
        binds: dict[str, dict[str, str]] = {}
        if keep:
            # The server runs from the gate folder and listens there, so a later harness can reconnect.
            (self.gate_dir / "exec_server.py").write_bytes(_SERVER_SOURCE)
            (self.gate_dir / HARNESS_SOCKET).unlink(missing_ok=True)
            binds = {str(self.gate_dir.resolve()): {"bind": GATE_MOUNT, "mode": "rw"}}
            # Through sh only for the redirection: whatever stops python early is in the log too.
            command = ["sh", "-c", f"exec python3 -I {GATE_MOUNT}/exec_server.py --listen "
                       f"{GATE_MOUNT}/{HARNESS_SOCKET} --attempt {spec.attempt_id} 2>>{GATE_MOUNT}/exec-server.log"]
        if spec.gateway_socket:
            # Read-only: root inside connects to the socket (which works through a read-only bind
            # mount) and never needs to create anything in a host folder.
            binds[str(Path(spec.gateway_socket).parent.resolve())] = {"bind": GATEWAY_MOUNT, "mode": "ro"}
        if spec.agent_gateway_socket:
            binds[str(Path(spec.agent_gateway_socket).parent.resolve())] = {"bind": AGENT_GATEWAY_MOUNT, "mode": "ro"}
        host_config = client.api.create_host_config(
            auto_remove=not keep,
            binds=binds or None,
            network_mode=self._network.name if self._network else "none",
            # IPv6 off: a link-local address would reach the host past the host's IPv4 rules
            sysctls={"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
            if self._network else None,
            nano_cpus=int(min(spec.cpus, self.engine.cpu_count()) * 1e9),
            mem_limit=memory,
            memswap_limit=memory,
            pids_limit=spec.max_processes + HARNESS_PROCESSES,
            shm_size=self._shm_bytes,
            device_requests=devices,
            # sshd (human attempts, as root) fails a pty login when it cannot write its audit record.
            cap_drop=["NET_RAW", "MKNOD"] if keep else ["NET_RAW", "MKNOD", "AUDIT_WRITE"],
            security_opt=["no-new-privileges"],
            log_config=LogConfig(type="none"),
        )
        try:
            created = client.api.create_container(
                spec.image,
                command=command,
                name=name,
                hostname=f"attempt-{spec.attempt_id}",
                user="0",
                stdin_open=not keep,
                detach=keep,  # with stdin_open: StdinOnce, so a dead harness closes the server's stdin
                tty=False,
                labels=self._labels(),
                environment=dict(spec.env),
                working_dir="/",
                host_config=host_config,
            )
        except docker.errors.ImageNotFound:
            raise SandboxStartError(
                f"image {spec.image} not found; build it with `rebench envs build {spec.environment} "
                f"--profile {spec.profile} --backend docker`"
            ) from None
        # A model without a second inspect round trip: attach, start and get_archive need only the id.
        return client.containers.prepare_model({"Id": created["Id"]})

    async def start(self) -> None:
        started = time.perf_counter()
        try:
            if self.spec.network == NetworkPolicy.FULL:
                self._network = await asyncio.to_thread(AttemptNetwork.create, self.engine.client,
                                                        self.spec.attempt_id, self._labels())
            self._container = await asyncio.to_thread(self._create)
            self.container_id = str(self._container.id)
            raw = None
            if not self.spec.keep_alive:
                sock = await asyncio.to_thread(
                    self._container.attach_socket, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
                )
                raw = getattr(sock, "_sock", sock)
            await asyncio.to_thread(self._container.start)
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
            await self._open_channel(raw, bootstrap=not self.spec.keep_alive)
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
        result = await self.exec(["sh", "-c", _FORWARDER_START, "forwarder", str(port),
                                  f"{mount}/{Path(host_socket).name}"],
                                 user="root", cwd="/", timeout=30, stdin=_FORWARDER_SOURCE)
        if not result.ok:
            raise SandboxError(f"the gateway forwarder did not start: {(result.stdout + result.stderr).strip()}")

    async def _connect_gate(self) -> socket.socket:
        """Connect to a keep-alive container's exec server on gate_dir/harness.sock (waiting for it to listen)."""
        path = str(self.gate_dir / HARNESS_SOCKET)
        deadline = time.monotonic() + _CONNECT_S
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

    async def _open_channel(self, raw: socket.socket, *, bootstrap: bool) -> None:
        """Open the exec channel, check the server's health and the image's users."""
        self._channel = ExecChannel(raw, multiplexed=bootstrap)
        self._channel.on_event = self._on_event
        source = str(len(_SERVER_SOURCE)).encode() + b"\n" + _SERVER_SOURCE if bootstrap else b""
        await self._channel.open(source)
        health = await asyncio.wait_for(
            self._channel.request(
                {"op": "ping", "users": ["agent", "root", "scorer", SUBJECT_USER], "groups": ["protected"]}
            ),
            10,
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
        await self._setup_cgroup(health)
        self._disk_watch = asyncio.create_task(self._watch_disk())

    async def _setup_cgroup(self, health: dict[str, Any]) -> None:
        """Put the exec server's spawner, and so every agent-side process, into the agent's
        cgroup (rebench/sandbox/docker/cgroups.py), checked from the host; a reattaching harness
        finds it placed and thaws it (its predecessor may have died during a score call)."""
        spawner = health.get("spawner")
        if not isinstance(spawner, int):
            raise SandboxStartError(f"the exec server of attempt {self.spec.attempt_id} has no spawner")
        info = await asyncio.to_thread(self.engine.client.api.inspect_container, self.container_id)
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
        reply = await asyncio.wait_for(self._require_channel().request({"op": "agent_cgroup", "spawner": spawner}), 10)
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

    # -- the task command ------------------------------------------------------
    async def serve_task(self, handler: TaskHandler) -> None:
        """Answer the `task` command with `handler` in a plain (not keep-alive) attempt: the exec
        server opens the root-owned task socket, as it does for a human attempt, and the client
        goes to /usr/local/bin/task (an agent installed in the sandbox scores from its shell)."""
        if self._channel is None:
            raise SandboxError(f"attempt {self.spec.attempt_id}: the sandbox is not started")
        self.task_handler = handler
        await self.write_file(TASK_CLIENT, _TASK_CLIENT_SOURCE, user="root", mode=0o755)
        reply = await self._channel.request({"op": "task_listen"})
        if not reply.get("ok"):
            raise SandboxError(f"attempt {self.spec.attempt_id}: the task socket did not open: {reply}")

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("event") != "task":
            return
        job = asyncio.get_running_loop().create_task(self._answer_task(message))
        self._task_jobs.add(job)
        job.add_done_callback(self._task_jobs.discard)

    async def _answer_task(self, message: dict[str, Any]) -> None:
        channel = self._channel
        try:
            request = TaskRequest(
                command=str(message.get("command", "")),
                args=[str(a) for a in message.get("args") or []],
                uid=int(message.get("uid", -1)),
                pid=int(message.get("pid", 0)),
            )
            if self.task_handler is None:
                reply = TaskReply(exit_code=NO_HARNESS_EXIT,
                                  output=attach_hint(self.spec.attempt_id, "nothing answers task commands now"))
            else:
                reply = await self.task_handler(request)
        except Exception as exc:  # the expert gets a message, the channel lives on
            reply = TaskReply(exit_code=1, output=f"task: the harness failed: {type(exc).__name__}: {exc}\n")
        if channel is not None and channel.is_open:
            with contextlib.suppress(SandboxError, TimeoutError):
                await asyncio.wait_for(
                    channel.request(
                        {"op": "task_reply", "task": message.get("task"), "exit_code": reply.exit_code,
                         "output": reply.output}
                    ),
                    30,
                )

    def _written_bytes(self) -> int:
        found = self.engine.client.api.containers(all=True, size=True, filters={"id": self.container_id})
        if not found:
            raise SandboxDied(f"container of attempt {self.spec.attempt_id} is gone")
        return int(found[0].get("SizeRw") or 0)

    async def _watch_disk(self) -> None:
        """Poll the container's writable layer; past the limit, kill the agent's processes
        and refuse its further commands (the attempt ends as a `disk` limit)."""
        while True:
            await asyncio.sleep(DISK_POLL_S)
            try:
                written = await asyncio.to_thread(self._written_bytes)
            except Exception:
                return  # the container is gone; exec reports that
            if written > self.disk_limit_bytes:
                self.breach = (f"the attempt wrote {written / 1024**3:.2f} GB into its container, "
                               f"over the {self.disk_limit_bytes / 1024**3:g} GB disk limit")
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
        if self._disk_watch is not None:
            self._disk_watch.cancel()
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
        self._container = None

    def _require_channel(self) -> ExecChannel:
        if self._channel is None:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} is not started")
        return self._channel

    # -- commands --------------------------------------------------------------
    async def exec(
        self,
        cmd: str | list[str],
        *,
        user: User = "agent",
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
        agent_side: bool = False,
    ) -> ExecResult:
        """`agent_side` (root commands only): start it in the agent's cgroup, e.g. the SSH gate that
        runs the expert's shells, so it is frozen, counted and killed with the agent."""
        started = time.monotonic()
        result = await self._run(cmd, user=user, timeout=timeout, env=env, cwd=cwd, stdin=stdin,
                                 agent_side=agent_side)
        stdout, cut_out = decode_capture(result.get("stdout", {}))
        stderr, cut_err = decode_capture(result.get("stderr", {}))
        return ExecResult(
            exit_code=result.get("exit_code"),
            stdout=stdout,
            stderr=stderr,
            timed_out=bool(result.get("timed_out")),
            duration_s=float(result.get("duration_s") or (time.monotonic() - started)),
            truncated=cut_out or cut_err,
        )

    async def _run(
        self,
        cmd: str | list[str],
        *,
        user: User,
        timeout: float | None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
        limit: int = OUTPUT_LIMIT_BYTES,
        agent_side: bool = False,
    ) -> dict[str, Any]:
        """One command through the channel; the server's raw reply (streams as base64 head/tail).
        A scorer's command runs with the agent's cgroup frozen from the host, thawed however it ends."""
        channel = self._require_channel()
        if self.breach is not None and user == "agent":
            raise LimitExceeded("disk", self.breach)
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        account, groups = _USERS[user]
        if agent_side and user != "root":
            raise SandboxError("agent_side applies to root commands only (the agent's own always are)")
        variables = {
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "REBENCH_HOME": self.paths.home,
            "REBENCH_SOLUTION": self.paths.solution,
            **({"REBENCH_SUBJECT_USER": SUBJECT_USER} if user == "scorer" else {}),
            **(env or {}),
        }
        request = {
            "op": "exec",
            "argv": argv,
            "user": account,
            "groups": groups,
            "env": variables,
            "cwd": in_solution(self.paths, cwd) if cwd else (self.paths.solution if user != "root" else "/"),
            "cwd_fallback": cwd is None,
            "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
            "timeout": timeout,
            "limit": limit,
            # Scoring runs with the protected group: nothing it started may outlive it.
            "reap_groups": groups,
            "agent_side": agent_side,
            **(_SCORER_REQUEST if user == "scorer" else {}),
            # The scorer and the submitted code are other users now: they must be able to read it.
            **({"share_read": [self.paths.solution]} if user == "scorer" else {}),
            # The submitted code may use /dev/shm: no world-writable entry of the agent's may wait there for it.
            **({"close_to_others": ["/dev/shm"]} if user == "scorer" else {}),
            # Whatever the score call's users wrote where the agent could reach it goes before it resumes.
            **({"sweep": self._scoring_sweep()} if user == "scorer" else {}),
        }
        if user == "scorer":
            await self._freeze_agent()
        try:
            if user == "scorer" and self._network is not None:
                # nothing the submitted code sees while it is scored may leave for a server the agent reads later
                await asyncio.to_thread(self._network.close_for_scoring)
            request_id, reply = channel.send(request)
            try:
                await channel.drain()
                wait = None if timeout is None else timeout + _REPLY_MARGIN_S
                result: dict[str, Any] = await asyncio.wait_for(asyncio.shield(reply), wait)
                return result
            except TimeoutError:
                await self._kill(request_id)
                raise SandboxDied(f"sandbox of attempt {self.spec.attempt_id} stopped answering") from None
            except asyncio.CancelledError:
                await self._kill(request_id)
                raise
        finally:
            if user == "scorer":
                if self._network is not None:
                    await asyncio.to_thread(self._network.open_after_scoring)
                await self._thaw_agent()

    async def _freeze_agent(self) -> None:
        """Freeze the agent's cgroup from the host and wait until the kernel says it is frozen; a
        process of the agent's user found outside it (none should be) is killed."""
        cgroup = self._cgroup
        if cgroup is None:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} is not started")
        try:
            await asyncio.to_thread(cgroup.freeze)
            stray = await asyncio.to_thread(cgroup.escaped, {self._agent_uid})
        except CgroupError as exc:
            raise SandboxError(f"attempt {self.spec.attempt_id}: cannot freeze the agent: {exc}") from None
        for pid in stray:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    async def _thaw_agent(self) -> None:
        cgroup = self._cgroup
        if cgroup is not None:
            with contextlib.suppress(CgroupError):
                await asyncio.to_thread(cgroup.thaw)

    def _scoring_sweep(self) -> list[dict[str, Any]]:
        """What the exec server removes after a score call: everything `subject` (the submitted
        code) owns in the shared temporary folders, its home and the agent's home, and everything
        the scorer owns in the shared temporary folders (its scratch folders, even after a kill)."""
        shared = ["/tmp", "/var/tmp", "/dev/shm"]
        return [{"user": SUBJECT_USER, "dirs": [*shared, f"/home/{SUBJECT_USER}", self.paths.home]},
                {"user": "scorer", "dirs": shared}]

    async def _kill(self, request_id: int) -> None:
        """Kill a command's tree after the caller gave up on it (cancelled, or no reply)."""
        channel = self._channel
        if channel is None or not channel.is_open:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(channel.request({"op": "kill", "target": request_id})), 5)

    # -- files -----------------------------------------------------------------
    def _require_files(self) -> ContainerFiles:
        if self._files is None:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} is not started")
        return self._files

    async def _make_folder(self, path: str, owner: User) -> None:
        result = await self.exec(["mkdir", "-p", path], user=owner, cwd="/", timeout=30)
        if not result.ok:
            raise SandboxError(
                f"cannot create {path} in attempt {self.spec.attempt_id}: {result.stderr.strip()}"
            )

    async def read_file(self, path: str) -> bytes:
        return await self._require_files().read(path)

    async def write_file(
        self, path: str, data: bytes, *, user: User = "agent", mode: int | None = None
    ) -> None:
        await self._require_files().write(path, data, user, mode)

    async def copy_in(
        self, source_dir: str, dest: str, *, user: User = "agent", read_only: bool = False
    ) -> None:
        await self._require_files().copy_in(source_dir, dest, user, read_only)

    async def copy_out(self, source: str, dest_dir: str, budget: SnapshotBudget | None = None) -> SnapshotReport:
        return await self._require_files().copy_out(source, dest_dir, budget)

    # -- files as the agent (its tools: the kernel decides, rebench.sandbox.agent_files) --
    async def agent_read_file(self, path: str) -> bytes:
        return await self._require_files().agent_read(path)

    async def agent_write_file(self, path: str, data: bytes) -> None:
        await self._require_files().agent_write(path, data)

    async def agent_copy_in(self, source_dir: str, dest: str) -> None:
        await self._require_files().agent_copy_in(source_dir, dest)


def create_sandbox(spec: SandboxSpec, env: object = None) -> DockerSandbox:
    """The factory's entry: the attempt runs in `spec.image`, which rebench.sandboxes resolves to the
    environment's current image (built by `rebench envs build ENV --profile P --backend docker`)."""
    if spec.image is None:
        raise RebenchError(f"no image for environment {spec.environment!r} ({spec.profile}): "
                           "create Docker sandboxes through rebench.sandboxes.create_sandbox")
    return DockerSandbox(spec, engine=DockerEngine.connect())
