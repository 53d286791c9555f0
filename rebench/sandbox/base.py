"""The Sandbox protocol every backend implements.

The runner, the agents and the scoring code only ever talk to this protocol, so
a new backend (a remote host, a cluster) plugs in without touching them.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport

User = Literal["agent", "root", "scorer"]
"""Who runs a command: the agent under test, the harness, or the scoring helper
(the agent's uid plus the `protected` group, as in RE-Bench)."""

OUTPUT_LIMIT_BYTES = 1_000_000
TRUNCATION_MARKER = "\n[... output truncated by rebench: {dropped} bytes dropped ...]\n"


class ExecResult(BaseModel):
    """The outcome of one command; `exit_code` is None when it was killed by a timeout."""

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxPaths(BaseModel):
    """Where things live inside a sandbox. Docker uses the RE-Bench layout; local
    uses folders under the attempt directory with the same roles."""

    home: str = "/home/agent"
    solution: str = "/home/agent/solution"
    protected: str = "/protected"
    helper: str = "/opt/rebench/score_helper.py"
    python: str = "python3"

    def in_home(self, *parts: str) -> str:
        return str(PurePosixPath(self.home, *parts))

    def in_protected(self, *parts: str) -> str:
        return str(PurePosixPath(self.protected, *parts))


class SandboxSpec(BaseModel):
    """What the runner asks of a backend for one attempt."""

    attempt_id: int
    campaign_id: int | None = None
    environment: str
    profile: str
    image: str | None = None
    cpus: float = 2.0
    memory_gb: float = 4.0
    gpus: list[int] = Field(default_factory=list)
    max_processes: int = 2048
    network: bool = False
    env: dict[str, str] = Field(default_factory=dict)


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place to run one attempt.

    `exec` must kill the whole process tree on timeout or cancellation, not only
    the client call: an agent under test must not outlive its budget.
    """

    paths: SandboxPaths

    async def start(self) -> None: ...

    async def exec(
        self,
        cmd: str | list[str],
        *,
        user: User = "agent",
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes, *, user: User = "agent", mode: int | None = None) -> None: ...

    async def copy_in(self, source_dir: str, dest: str, *, user: User = "agent", read_only: bool = False) -> None:
        """Copy a host directory's contents into the sandbox at `dest`."""
        ...

    async def copy_out(self, source: str, dest_dir: str, budget: SnapshotBudget | None = None) -> SnapshotReport:
        """Copy a sandbox directory's contents out to a fresh host directory (a snapshot),
        within `budget` (the attempt's, shared by its snapshots; None: the default cap),
        by the rules of `rebench.sandbox.snapshot`: no special files, nothing from outside."""
        ...

    async def alive(self) -> bool: ...

    async def stop(self) -> None: ...


def cap_output(data: bytes, limit: int = OUTPUT_LIMIT_BYTES) -> tuple[str, bool]:
    """Decode output, keeping head and tail with a clear marker when it is too long."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace"), False
    half = limit // 2
    dropped = len(data) - 2 * half
    head = data[:half].decode("utf-8", errors="replace")
    tail = data[-half:].decode("utf-8", errors="replace")
    return head + TRUNCATION_MARKER.format(dropped=dropped) + tail, True
