"""The `docker` backend: one container per attempt, through the Docker Engine API.

This is the only module of rebench that imports the `docker` SDK; image builds
and garbage collection go through `DockerEngine` below.

Layout inside the container (the RE-Bench one): user `agent` (uid 1000) owns
/home/agent; /protected is root:protected and closed to the agent; the scoring
helper is /opt/rebench/score_helper.py. Scoring runs as its own user `scorer`
(with the extra group `protected`), never as the agent's uid; the submitted code
that scoring runs is switched to a third user, `subject` (see score_helper.py).
While a score call runs, every process of the agent is frozen (exec_server.py).

Commands do not go through `docker exec` (about 50 ms each): the container's
main process is our exec server (exec_server.py, sent over stdin to a one-line
loader so any image with python3 works), and every call is one request on the
attached stream. With StdinOnce, the stream closing (the harness died) closes
the server's stdin, the server kills everything and exits, and AutoRemove
deletes the container: a crash leaks nothing for long, and `rebench gc` sweeps
the rest.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors
from docker.types import DeviceRequest, LogConfig

from rebench.agents.base import LimitExceeded
from rebench.errors import SandboxError
from rebench.sandbox.base import OUTPUT_LIMIT_BYTES, ExecResult, SandboxPaths, SandboxSpec, User
from rebench.sandbox.channel import ExecChannel, decode_capture
from rebench.sandbox.snapshot import (
    BoundedReader,
    SnapshotBudget,
    SnapshotReport,
    default_budget,
    extract_stream,
    stream_limit,
)

LABEL_ATTEMPT = "rebench.attempt"
LABEL_CAMPAIGN = "rebench.campaign"
LABEL_OWNER = "rebench.owner"
"""`host:pid:start-ticks` of the harness process; gc keeps containers whose owner still runs."""

_SERVER_SOURCE = (Path(__file__).with_name("exec_server.py")).read_bytes()
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
    # Nothing of the agent runs beside the scorer; nothing the score call started outlives it.
    "freeze_users": ["agent"],
    "reap_users": ["scorer", SUBJECT_USER],
    # Kept as ambient capabilities so the helper can switch the submitted code to `subject`.
    "caps": ["setuid", "setgid"],
}
OPERATION_TIMEOUT_S = 600
DISK_POLL_S = 5.0
DEFAULT_DISK_LIMIT_GB = 50.0
"""What an attempt may write into its container (overlay2 on ext4 cannot enforce a quota,
so the harness polls the writable layer's size); `REBENCH_DISK_LIMIT_GB` overrides."""
_REPLY_MARGIN_S = 30.0
"""How long past a command's own timeout we wait for the server before calling the sandbox dead."""


def owner_token(pid: int | None = None) -> str:
    """Identify a process across pid reuse: host name, pid and its start time."""
    pid = pid or os.getpid()
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        start = stat[stat.rfind(b")") + 2 :].split()[19].decode()
    except (OSError, IndexError):
        start = "0"
    return f"{socket.gethostname()}:{pid}:{start}"


def owner_alive(token: str) -> bool:
    """Whether the harness process named by `owner_token` still runs on this host."""
    try:
        host, pid, _ = token.split(":")
    except ValueError:
        return False
    if host != socket.gethostname():
        return True  # another machine's attempt: not ours to judge
    return owner_token(int(pid)) == token


class DockerEngine:
    """A thin, typed wrapper over the SDK client for everything besides sandboxes."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    @classmethod
    def connect(cls, timeout: float = 5.0) -> DockerEngine:
        """Connect to the engine named by DOCKER_HOST (or the local socket); SandboxError if none answers."""
        try:
            client = docker.from_env(timeout=max(1, int(timeout)))
            client.ping()
        except Exception as exc:
            raise SandboxError(f"no Docker engine answers ({type(exc).__name__}: {exc})") from None
        # Answering quickly was the test; real calls (removing a GB-sized image, creating a
        # container on a loaded host) may take far longer.
        client.api.timeout = OPERATION_TIMEOUT_S
        return cls(client)

    @staticmethod
    def available(timeout: float = 3.0) -> bool:
        try:
            DockerEngine.connect(timeout).client.close()
        except SandboxError:
            return False
        return True

    def cpu_count(self) -> int:
        """CPUs of the engine's host (a container may not ask for more)."""
        if not hasattr(self, "_ncpu"):
            self._ncpu = int(self.client.info().get("NCPU") or os.cpu_count() or 1)
        return self._ncpu

    # -- images --------------------------------------------------------------
    def image_id(self, tag: str) -> str | None:
        try:
            return str(self.client.images.get(tag).id)
        except docker.errors.ImageNotFound:
            return None

    def image_labels(self, tag: str) -> dict[str, str]:
        return dict(self.client.images.get(tag).labels or {})

    def import_rootfs(self, tarball: Path, repository: str, tag: str, changes: list[str]) -> str:
        """`docker import`: make an image from a root filesystem tarball."""
        try:  # from a file, not a stream: the SDK's chunked upload of a stream is refused by some engines
            self.client.api.import_image_from_file(
                str(tarball), repository=repository, tag=tag, changes=changes
            )
        except docker.errors.APIError as exc:
            raise SandboxError(f"docker import of {tarball} failed: {exc}") from None
        image_id = self.image_id(f"{repository}:{tag}")
        if image_id is None:
            raise SandboxError(f"docker import of {tarball} did not produce {repository}:{tag}")
        return image_id

    def build(
        self,
        context: Path,
        dockerfile: str,
        tag: str,
        buildargs: dict[str, str],
        labels: dict[str, str],
        log: Callable[[str], None] = lambda line: None,
    ) -> str:
        """Build with host networking (proxied hosts), streaming the build log to `log`."""
        stream = self.client.api.build(
            path=str(context),
            dockerfile=dockerfile,
            tag=tag,
            buildargs=buildargs,
            labels=labels,
            network_mode="host",
            rm=True,
            forcerm=True,
            decode=True,
        )
        tail: list[str] = []
        for chunk in stream:
            if "stream" in chunk:
                for line in str(chunk["stream"]).splitlines():
                    tail = [*tail[-30:], line]
                    if line.startswith("Step "):
                        log(line[:160])
            if "error" in chunk:
                detail = "\n".join(tail[-15:])
                raise SandboxError(f"image build of {tag} failed: {str(chunk['error']).strip()}\n{detail}")
        image_id = self.image_id(tag)
        if image_id is None:
            raise SandboxError(f"image build of {tag} finished without an image")
        return image_id

    def tag(self, image: str, repository: str, tag: str) -> None:
        self.client.images.get(image).tag(repository, tag)

    def images(self, label: str) -> list[tuple[str, list[str], dict[str, str]]]:
        return [
            (str(i.id), list(i.tags), dict(i.labels or {}))
            for i in self.client.images.list(filters={"label": label})
        ]

    def image_created(self, ref: str) -> str:
        return str(self.client.images.get(ref).attrs.get("Created", ""))

    def remove_image(self, ref: str) -> bool:
        """Remove an image unless a container or a child image still uses it."""
        try:
            self.client.images.remove(ref, noprune=False)
        except (docker.errors.ImageNotFound, docker.errors.APIError):
            return False
        return True

    # -- containers ----------------------------------------------------------
    def containers(self, label: str = LABEL_ATTEMPT) -> list[tuple[str, str, str, dict[str, str]]]:
        """(id, name, status, labels) of every container carrying `label`, running or not."""
        found = self.client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        return [(str(c.id), str(c.name), str(c.status), dict(c.labels)) for c in found]

    def remove_container(self, container_id: str) -> bool:
        try:
            self.client.containers.get(container_id).remove(force=True, v=True)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                return False
            raise
        return True

    def volumes(self, label: str = LABEL_ATTEMPT) -> list[tuple[str, dict[str, str]]]:
        return [
            (str(v.name), dict(v.attrs.get("Labels") or {}))
            for v in self.client.volumes.list(filters={"label": label})
        ]

    def remove_volume(self, name: str) -> bool:
        try:
            self.client.volumes.get(name).remove(force=True)
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError:
            return False
        return True


def _tar_one(name: str, data: bytes, uid: int, gid: int, mode: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.uid, info.gid, info.mode, info.mtime = uid, gid, mode, int(time.time())
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _tar_dir(source: Path, uid: int, gid: int, clear: int, handle: Any) -> None:
    """Write `source`'s contents (not the folder itself) as a tar with the given owner,
    clearing the `clear` permission bits."""

    def chown(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in PurePosixPath(info.name).parts:
            return None
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        info.mode &= ~clear
        return info

    with tarfile.open(fileobj=handle, mode="w") as archive:
        for item in sorted(source.iterdir()):
            archive.add(str(item), arcname=item.name, filter=chown)


class DockerSandbox:
    """One attempt's container. Create with a spec naming the environment image."""

    backend = "docker"

    def __init__(
        self,
        spec: SandboxSpec,
        *,
        engine: DockerEngine | None = None,
        network: bool | None = None,
        shm_gb: float | None = None,
    ) -> None:
        if not spec.image:
            raise SandboxError(
                f"no image for attempt {spec.attempt_id}; run `rebench envs build {spec.environment}`"
            )
        self.spec = spec
        self.paths = SandboxPaths()
        self._engine = engine
        self._network = spec.network if network is None else network
        self._shm_bytes = int((shm_gb if shm_gb is not None else max(0.5, spec.memory_gb / 2)) * 1024**3)
        self._container: Any = None
        self._channel: ExecChannel | None = None
        self._ids: dict[str, Any] = {}
        self.container_id: str | None = None
        self.start_to_ready_s: float | None = None
        limit_gb = float(os.environ.get("REBENCH_DISK_LIMIT_GB") or DEFAULT_DISK_LIMIT_GB)
        self.disk_limit_bytes = int(limit_gb * 1024**3)
        self.breach: str | None = None
        """Set when the agent broke a limit the engine cannot enforce (disk); its commands then fail."""
        self._disk_watch: asyncio.Task[None] | None = None

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
        host_config = client.api.create_host_config(
            auto_remove=True,
            network_mode="bridge" if self._network else "none",
            nano_cpus=int(min(spec.cpus, self.engine.cpu_count()) * 1e9),
            mem_limit=memory,
            memswap_limit=memory,
            pids_limit=spec.max_processes,
            shm_size=self._shm_bytes,
            device_requests=devices,
            cap_drop=["NET_RAW", "MKNOD", "AUDIT_WRITE"],
            security_opt=["no-new-privileges"],
            log_config=LogConfig(type="none"),
        )
        try:
            created = client.api.create_container(
                spec.image,
                command=["python3", "-I", "-c", _LOADER],
                name=name,
                hostname=f"attempt-{spec.attempt_id}",
                user="0",
                stdin_open=True,
                detach=False,  # with stdin_open: StdinOnce, so a dead harness closes the server's stdin
                tty=False,
                labels=self._labels(),
                environment=dict(spec.env),
                working_dir="/",
                host_config=host_config,
            )
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"image {spec.image} not found; build it with `rebench envs build {spec.environment} "
                f"--profile {spec.profile} --backend docker`"
            ) from None
        # A model without a second inspect round trip: attach, start and get_archive need only the id.
        return client.containers.prepare_model({"Id": created["Id"]})

    async def start(self) -> None:
        started = time.perf_counter()
        try:
            self._container = await asyncio.to_thread(self._create)
            self.container_id = str(self._container.id)
            sock = await asyncio.to_thread(
                self._container.attach_socket, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            raw = getattr(sock, "_sock", sock)
            await asyncio.to_thread(self._container.start)
        except docker.errors.DockerException as exc:
            await self.stop()
            raise SandboxError(
                f"could not start a container for attempt {self.spec.attempt_id}: {exc}"
            ) from None
        except BaseException:
            await self.stop()
            raise
        self._channel = ExecChannel(raw)
        try:
            bootstrap = str(len(_SERVER_SOURCE)).encode() + b"\n" + _SERVER_SOURCE
            await self._channel.open(bootstrap)
            health = await asyncio.wait_for(
                self._channel.request(
                    {"op": "ping", "users": ["agent", "root", "scorer", SUBJECT_USER], "groups": ["protected"]}
                ),
                10,
            )
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, SandboxError | TimeoutError):
                raise SandboxError(
                    f"container for attempt {self.spec.attempt_id} failed its health check: {exc}"
                ) from None
            raise
        ids = health.get("ids", {})
        missing = [name for name in ("agent", "scorer", SUBJECT_USER) if not ids.get(name)]
        if missing:
            await self.stop()
            raise SandboxError(
                f"image {self.spec.image} has no user {', '.join(missing)}; rebuild it from the current "
                f"rebench base image (`rebench envs build {self.spec.environment} --backend docker`)"
            )
        self._ids = ids
        self.start_to_ready_s = time.perf_counter() - started
        self._disk_watch = asyncio.create_task(self._watch_disk())

    def _written_bytes(self) -> int:
        found = self.engine.client.api.containers(all=True, size=True, filters={"id": self.container_id})
        if not found:
            raise SandboxError(f"container of attempt {self.spec.attempt_id} is gone")
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
                channel = self._channel
                if channel is not None and channel.is_open:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(channel.request({"op": "kill_user", "user": "agent"}), 30)
                return

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
        if self._channel is not None:
            await self._channel.close()
        if self.container_id is not None:
            with contextlib.suppress(SandboxError, docker.errors.DockerException):
                await asyncio.to_thread(self.engine.remove_container, self.container_id)
        self._container = None

    def _require_channel(self) -> ExecChannel:
        if self._channel is None:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} is not started")
        return self._channel

    # -- ownership -------------------------------------------------------------
    def _placement(self, user: User, dest: str, read_only: bool) -> tuple[int, int, int]:
        """(uid, gid, permission bits to clear) for files put at `dest` on behalf of `user`.

        Under /protected everything is root:protected and closed to others, so the
        scorer (the agent's uid plus group `protected`) reads it and the agent cannot.
        Read-only files are root's, so the agent cannot change them."""
        agent_uid, agent_gid = (int(i) for i in (self._ids.get("agent") or (1000, 1000)))
        protected_gid = int(self._ids.get("group:protected") or 0)
        clear = 0o222 if read_only else 0
        root = PurePosixPath(self.paths.protected)
        if PurePosixPath(dest) == root or root in PurePosixPath(dest).parents:
            return 0, protected_gid, clear | 0o007
        if read_only or user == "root":
            return 0, 0, clear
        if user == "scorer":
            scorer_uid = int((self._ids.get("scorer") or (agent_uid,))[0])
            return scorer_uid, protected_gid, clear
        return agent_uid, agent_gid, clear

    def _resolve(self, path: str) -> str:
        return path if path.startswith("/") else str(PurePosixPath(self.paths.solution, path))

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
    ) -> ExecResult:
        channel = self._require_channel()
        if self.breach is not None and user == "agent":
            raise LimitExceeded("disk", self.breach)
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        account, groups = _USERS[user]
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
            "cwd": self._resolve(cwd) if cwd else (self.paths.solution if user != "root" else "/"),
            "cwd_fallback": cwd is None,
            "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
            "timeout": timeout,
            "limit": OUTPUT_LIMIT_BYTES,
            # Scoring runs with the protected group: nothing it started may outlive it.
            "reap_groups": groups,
            **(_SCORER_REQUEST if user == "scorer" else {}),
            # The scorer and the submitted code are other users now: they must be able to read it.
            **({"share_read": [self.paths.solution]} if user == "scorer" else {}),
        }
        started = time.monotonic()
        request_id, reply = channel.send(request)
        try:
            await channel.drain()
            wait = None if timeout is None else timeout + _REPLY_MARGIN_S
            result = await asyncio.wait_for(asyncio.shield(reply), wait)
        except TimeoutError:
            await self._kill(request_id)
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} stopped answering") from None
        except asyncio.CancelledError:
            await self._kill(request_id)
            raise
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

    async def _kill(self, request_id: int) -> None:
        """Kill a command's tree after the caller gave up on it (cancelled, or no reply)."""
        channel = self._channel
        if channel is None or not channel.is_open:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(channel.request({"op": "kill", "target": request_id})), 5)

    # -- files -----------------------------------------------------------------
    def _get_archive(self, path: str, handle: Any) -> None:
        try:
            stream, _ = self._container.get_archive(path)
        except docker.errors.NotFound:
            raise FileNotFoundError(path) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot read {path} from attempt {self.spec.attempt_id}: {exc}") from None
        for chunk in stream:
            handle.write(chunk)
        handle.seek(0)

    async def read_file(self, path: str) -> bytes:
        self._require_channel()
        target = self._resolve(path)

        def read() -> bytes:
            with tempfile.TemporaryFile() as handle:
                self._get_archive(target, handle)
                with tarfile.open(fileobj=handle, mode="r") as archive:
                    member = archive.next()
                    if member is None:
                        raise FileNotFoundError(target)
                    if member.isdir():
                        raise IsADirectoryError(target)
                    extracted = archive.extractfile(member)
                    if extracted is None:
                        raise FileNotFoundError(target)
                    return extracted.read()

        return await asyncio.to_thread(read)

    async def _ensure_dir(self, path: str, owner: User) -> None:
        result = await self.exec(["mkdir", "-p", path], user=owner, cwd="/", timeout=30)
        if not result.ok:
            raise SandboxError(
                f"cannot create {path} in attempt {self.spec.attempt_id}: {result.stderr.strip()}"
            )

    def _put(self, dest: str, data: Any) -> None:
        try:
            ok = self._container.put_archive(dest, data)
        except docker.errors.NotFound:
            raise FileNotFoundError(dest) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot write into {dest} in attempt {self.spec.attempt_id}: {exc}") from None
        if not ok:
            raise SandboxError(f"cannot write into {dest} in attempt {self.spec.attempt_id}")

    async def write_file(
        self, path: str, data: bytes, *, user: User = "agent", mode: int | None = None
    ) -> None:
        self._require_channel()
        target = PurePosixPath(self._resolve(path))
        uid, gid, clear = self._placement(user, str(target), read_only=False)
        archive = _tar_one(target.name, data, uid, gid, (0o644 if mode is None else mode) & ~clear)
        try:
            await asyncio.to_thread(self._put, str(target.parent), archive)
        except FileNotFoundError:
            await self._ensure_dir(str(target.parent), "agent" if user == "agent" else "root")
            await asyncio.to_thread(self._put, str(target.parent), archive)

    async def copy_in(
        self, source_dir: str, dest: str, *, user: User = "agent", read_only: bool = False
    ) -> None:
        self._require_channel()
        source = Path(source_dir)
        if not source.is_dir():
            raise SandboxError(f"copy_in: {source} is not a directory")
        target = self._resolve(dest)
        uid, gid, clear = self._placement(user, target, read_only)
        await self._ensure_dir(target, "agent" if uid != 0 else "root")

        def put() -> None:
            with tempfile.TemporaryFile() as handle:
                _tar_dir(source, uid, gid, clear, handle)
                handle.seek(0)
                self._put(target, handle)

        await asyncio.to_thread(put)

    async def copy_out(self, source: str, dest_dir: str, budget: SnapshotBudget | None = None) -> SnapshotReport:
        """Stream the folder's archive from the engine and extract it within `budget`; the
        HTTP response is closed at the cap, so the engine stops sending (nothing past the cap
        is read, let alone stored)."""
        self._require_channel()
        target = self._resolve(source.rstrip("/") or "/")
        dest = Path(dest_dir)
        budget = budget or default_budget()

        def get() -> SnapshotReport:
            api = self._container.client.api
            try:
                response = api._get(api._url("/containers/{0}/archive", self._container.id),
                                    params={"path": target}, stream=True,
                                    headers={"Accept-Encoding": "identity"})
                api._raise_for_status(response)
            except docker.errors.NotFound:
                raise FileNotFoundError(target) from None
            except docker.errors.APIError as exc:
                raise SandboxError(f"cannot read {target} from attempt {self.spec.attempt_id}: {exc}") from None
            try:
                reader = BoundedReader(response.raw.read, stream_limit(budget))
                return extract_stream(reader, dest, PurePosixPath(target).name, budget)
            finally:
                response.close()

        return await asyncio.to_thread(get)


def engine_available(timeout: float = 3.0) -> bool:
    """Whether a Docker engine answers (the factory's choice of default backend)."""
    return DockerEngine.available(timeout)


def create_sandbox(spec: SandboxSpec, env: Any) -> DockerSandbox:
    """The factory's entry: the attempt runs in the environment's current image, which
    must have been built (`rebench envs build ENV --profile P --backend docker`)."""
    from rebench.images.build import current_environment_image

    engine = DockerEngine.connect()
    image = spec.image or current_environment_image(env, spec.profile, engine)
    return DockerSandbox(spec.model_copy(update={"image": image}), engine=engine)
