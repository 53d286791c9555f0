"""Files into and out of one attempt's container, through the engine's archive API
(no command runs for them, except `mkdir -p` for a missing folder), each owned as the
RE-Bench layout says (`ContainerFiles.placement`)."""

from __future__ import annotations

import asyncio
import base64
import errno
import tarfile
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import IO, Any

import docker.errors

from rebench.errors import SandboxError
from rebench.sandbox.agent_files import AGENT_FILE_LIMIT_BYTES, agent_io_argv, pack_folder, raise_for_reply, too_large
from rebench.sandbox.base import SandboxPaths, User
from rebench.sandbox.docker.archive import BoundedReader, extract_stream, stream_limit, tar_file, tar_folder
from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport, default_budget

MakeFolder = Callable[[str, User], Awaitable[None]]
"""Creates a folder (and its parents) in the container as the given user."""
RunRaw = Callable[..., Awaitable[dict[str, Any]]]
"""DockerSandbox._run: one command through the exec channel, the server's raw reply."""
_SYSTEM_PYTHON = "/usr/bin/python3"
"""What runs the agent's file tools: the image's own interpreter (root's, not the agent's to change)."""
AGENT_IO_TIMEOUT_S = 120.0


def in_solution(paths: SandboxPaths, path: str) -> str:
    """An absolute path in the container; relative ones are under the solution folder."""
    return path if path.startswith("/") else str(PurePosixPath(paths.solution, path))


class ContainerFiles:
    """The sandbox's file methods for one started container.

    `ids` are the account ids the exec server reported (`agent`, `scorer`: (uid, gid);
    `group:protected`: gid); `make_folder` runs `mkdir -p` through the exec channel, `run` any command.
    The archive API acts as root: it serves the harness's own files only. The agent's tools
    (`agent_*`) run a stdlib program as the agent instead (rebench.sandbox.agent_files)."""

    def __init__(self, container: Any, paths: SandboxPaths, ids: dict[str, Any], attempt_id: int,
                 make_folder: MakeFolder, run: RunRaw) -> None:
        self._container = container
        self.paths = paths
        self._ids = ids
        self._attempt = attempt_id
        self._make_folder = make_folder
        self._run = run

    def resolve(self, path: str) -> str:
        return in_solution(self.paths, path)

    def placement(self, user: User, dest: str, read_only: bool) -> tuple[int, int, int]:
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

    # -- engine calls (blocking; run in a thread) --------------------------------
    def _get_archive(self, path: str, handle: IO[bytes]) -> None:
        try:
            stream, _ = self._container.get_archive(path)
        except docker.errors.NotFound:
            raise FileNotFoundError(path) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot read {path} from attempt {self._attempt}: {exc}") from None
        for chunk in stream:
            handle.write(chunk)
        handle.seek(0)

    def _put(self, dest: str, data: Any) -> None:
        try:
            ok = self._container.put_archive(dest, data)
        except docker.errors.NotFound:
            raise FileNotFoundError(dest) from None
        except docker.errors.APIError as exc:
            raise SandboxError(f"cannot write into {dest} in attempt {self._attempt}: {exc}") from None
        if not ok:
            raise SandboxError(f"cannot write into {dest} in attempt {self._attempt}")

    # -- the sandbox's file methods ------------------------------------------------
    async def read(self, path: str) -> bytes:
        target = self.resolve(path)

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

    async def write(self, path: str, data: bytes, user: User, mode: int | None) -> None:
        target = PurePosixPath(self.resolve(path))
        uid, gid, clear = self.placement(user, str(target), read_only=False)
        archive = tar_file(target.name, data, uid, gid, (0o644 if mode is None else mode) & ~clear)
        try:
            await asyncio.to_thread(self._put, str(target.parent), archive)
        except FileNotFoundError:
            await self._make_folder(str(target.parent), "agent" if user == "agent" else "root")
            await asyncio.to_thread(self._put, str(target.parent), archive)

    async def copy_in(self, source_dir: str, dest: str, user: User, read_only: bool) -> None:
        source = Path(source_dir)
        if not source.is_dir():
            raise SandboxError(f"copy_in: {source} is not a directory")
        target = self.resolve(dest)
        uid, gid, clear = self.placement(user, target, read_only)
        await self._make_folder(target, "agent" if uid != 0 else "root")

        def put() -> None:
            with tempfile.TemporaryFile() as handle:
                tar_folder(source, uid, gid, clear, handle)
                handle.seek(0)
                self._put(target, handle)

        await asyncio.to_thread(put)

    async def copy_out(self, source: str, dest_dir: str, budget: SnapshotBudget | None) -> SnapshotReport:
        """Stream the folder's archive from the engine and extract it within `budget`; the
        HTTP response is closed at the cap, so the engine stops sending (nothing past the cap
        is read, let alone stored)."""
        target = self.resolve(source.rstrip("/") or "/")
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
                raise SandboxError(f"cannot read {target} from attempt {self._attempt}: {exc}") from None
            try:
                reader = BoundedReader(response.raw.read, stream_limit(budget))
                return extract_stream(reader, dest, PurePosixPath(target).name, budget)
            finally:
                response.close()

        return await asyncio.to_thread(get)

    # -- the agent's tools: a program run as the agent, so the kernel decides ----------------
    async def _as_agent(self, op: str, path: str, limit: int, stdin: bytes | None = None) -> bytes:
        target = self.resolve(path)
        result = await self._run(agent_io_argv(_SYSTEM_PYTHON, op, target, limit), user="agent",
                                 timeout=AGENT_IO_TIMEOUT_S, stdin=stdin, limit=limit + 1)
        if result.get("timed_out"):
            raise OSError(errno.ETIMEDOUT, f"{op} took over {AGENT_IO_TIMEOUT_S:g} s", target)
        error = base64.b64decode((result.get("stderr") or {}).get("head", "")).decode("utf-8", errors="replace")
        raise_for_reply(result.get("exit_code"), error, target, f"{op} as the agent")
        out = result.get("stdout") or {}
        if out.get("dropped") or out.get("tail"):
            raise too_large(target, limit + 1, limit, op)
        return base64.b64decode(out.get("head", ""))

    async def agent_read(self, path: str) -> bytes:
        return await self._as_agent("read", path, AGENT_FILE_LIMIT_BYTES)

    async def agent_write(self, path: str, data: bytes) -> None:
        if len(data) > AGENT_FILE_LIMIT_BYTES:
            raise too_large(self.resolve(path), len(data), AGENT_FILE_LIMIT_BYTES, "write")
        await self._as_agent("write", path, AGENT_FILE_LIMIT_BYTES, stdin=data)

    async def agent_copy_in(self, source_dir: str, dest: str) -> None:
        archive = await asyncio.to_thread(pack_folder, Path(source_dir))
        await self._as_agent("unpack", dest, AGENT_FILE_LIMIT_BYTES, stdin=archive)
