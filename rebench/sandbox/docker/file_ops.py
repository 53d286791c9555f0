"""Files in an attempt's container, as the harness and as the agent (rebench.sandbox.docker.files
does the work; the agent's own reads and writes run as the agent, so the kernel decides)."""

from __future__ import annotations

from rebench.errors import SandboxError
from rebench.sandbox.base import User
from rebench.sandbox.docker.commands import ContainerCommands
from rebench.sandbox.docker.files import ContainerFiles
from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport


class ContainerFileOps(ContainerCommands):
    """The file half of DockerSandbox."""

    _files: ContainerFiles | None

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
