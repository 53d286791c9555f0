"""The Docker engine: a typed wrapper over the SDK client for images, containers and
volumes, and the labels and owner tokens by which `rebench gc` tells a running attempt's
container from an orphan. Sandboxes use it; so do image builds and garbage collection."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors

from rebench.errors import SandboxError, SandboxStartError
from rebench.sandbox.docker.cgroups import thaw_left_frozen

LABEL_ATTEMPT = "rebench.attempt"
LABEL_CAMPAIGN = "rebench.campaign"
LABEL_OWNER = "rebench.owner"
LABEL_HUMAN = "rebench.human"
"""On a human attempt's container (value: the attempt id): it outlives its harness and only
`rebench human stop` ends it; `rebench gc` and orphan recovery leave it alone."""
"""`host:pid:start-ticks` of the harness process; gc keeps containers whose owner still runs."""
OPERATION_TIMEOUT_S = 600


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


REMOVE_TRIES = 4
REMOVE_PAUSE_S = 0.5
"""A force-removal the engine failed for the container's files still changing (moby's overlay2
"directory not empty") is tried again after 0.5, 1 and 1.5 s."""


class DockerEngine:
    """A thin, typed wrapper over the SDK client for everything besides sandboxes."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    @classmethod
    def connect(cls, timeout: float = 5.0) -> DockerEngine:
        """Connect to the engine named by DOCKER_HOST (or the local socket); SandboxStartError if none answers."""
        try:
            client = docker.from_env(timeout=max(1, int(timeout)))
            client.ping()
        except Exception as exc:
            raise SandboxStartError(f"no Docker engine answers ({type(exc).__name__}: {exc})") from None
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
        # The listing itself, not one inspect per image: an image another process removes meanwhile
        # (a parallel gc or build) must not fail the whole listing.
        return [
            (str(i["Id"]), [t for t in i.get("RepoTags") or [] if t != "<none>:<none>"], dict(i.get("Labels") or {}))
            for i in self.client.api.images(filters={"label": label})
        ]

    def image_created(self, ref: str) -> str:
        """When the image was made (ISO text); "" when it is gone (removed since it was listed)."""
        try:
            return str(self.client.api.inspect_image(ref).get("Created", ""))
        except docker.errors.ImageNotFound:
            return ""

    def images_in_use(self) -> set[str]:
        """Ids of the images any container on the engine was made from, running or stopped."""
        found = self.client.containers.list(all=True, ignore_removed=True)
        return {str(c.attrs.get("Image", "")) for c in found}

    def unique_image_bytes(self, wait_s: float = 120.0) -> dict[str, int]:
        """Image id -> bytes of its layers that no other image on the engine shares, as `docker system
        df -v` says: what removing that image alone would free.

        The engine runs one disk-usage walk at a time and refuses a second ("a disk usage operation is
        already running") rather than queueing it, so another process's `system df` (or gc) is waited out.
        """
        deadline = time.monotonic() + wait_s
        while True:
            try:
                images = self.client.api.df().get("Images") or []
                break
            except docker.errors.APIError as error:
                if "already running" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return {str(i["Id"]): max(0, int(i.get("Size") or 0) - max(0, int(i.get("SharedSize") or 0)))
                for i in images}

    def disk_usage(self) -> tuple[int, int] | None:
        """(used, total) bytes of the file system holding the engine's data, when it is on this host."""
        import shutil

        root = str(self.client.info().get("DockerRootDir") or "")
        try:
            usage = shutil.disk_usage(root) if root else None
        except OSError:  # a remote engine: its data root is not a path here
            return None
        return (usage.used, usage.total) if usage else None

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
        """Force-remove a container; False when it is gone already or another removal is under way.
        An agent cgroup its killed harness left frozen is thawed first, or the engine cannot kill it.
        A removal that races the container's last writes ("failed to remove root filesystem ...
        directory not empty": the engine leaves the container dead) is tried again, a few times."""
        for attempt in range(REMOVE_TRIES):
            try:
                container = self.client.containers.get(container_id)
                thaw_left_frozen(str(container.id))
                container.remove(force=True, v=True)
            except docker.errors.NotFound:
                return False
            except docker.errors.APIError as exc:
                if "already in progress" in str(exc):
                    return False
                if "failed to remove root filesystem" in str(exc) and attempt + 1 < REMOVE_TRIES:
                    time.sleep(REMOVE_PAUSE_S * (attempt + 1))
                    continue
                raise SandboxError(f"could not remove container {container_id[:12]}: "
                                   f"{getattr(exc, 'explanation', None) or exc}") from exc
            return True
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



def engine_available(timeout: float = 3.0) -> bool:
    """Whether a Docker engine answers (the factory's choice of default backend)."""
    return DockerEngine.available(timeout)
