"""The Sandbox protocol every backend implements.

The runner, the agents and the scoring code only ever talk to this protocol, so
a new backend (a remote host, a cluster) plugs in without touching them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from rebench.network import NetworkPolicy
from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport

User = Literal["agent", "root", "scorer"]
"""Who runs a command: the agent under test, the harness, or the scoring helper
(the agent's uid plus the `protected` group, as in RE-Bench)."""


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
    """The Docker image to run (docker backend); rebench.sandboxes fills it in from the environment."""
    python: str | None = None
    """The environment's built python on the host (local backend); rebench.sandboxes fills it in."""
    cpus: float = 2.0
    memory_gb: float = 4.0
    gpus: list[int] = Field(default_factory=list)
    max_processes: int = 2048
    network: NetworkPolicy = NetworkPolicy.NONE
    """none: loopback only; full: a network of the attempt's own (Docker; rebench.sandbox.docker.network).
    The local backend controls no network: its commands have the host's whatever this says."""
    env: dict[str, str] = Field(default_factory=dict)
    keep_alive: bool = False
    """A human attempt's sandbox: it outlives the harness process (no removal when the harness's
    stream closes; the harness reconnects through `gate_dir`). Docker only."""
    gate_dir: str | None = None
    """Host folder mounted (root-only inside) at /run/rebench/gate: sockets and recordings."""
    gateway_socket: str | None = None
    """Host Unix socket of the attempt's model gateway (rebench.gateway): a container backend mounts its
    folder root-only and relays 127.0.0.1:`gateway_port` inside to it (the local backend ignores both)."""
    gateway_port: int | None = None
    agent_gateway_socket: str | None = None
    """Host Unix socket of an installed agent's own metered gateway (rebench.agents.installed): mounted
    and relayed from 127.0.0.1:`agent_gateway_port` like the environment's (docker backend only)."""
    agent_gateway_port: int | None = None


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place to run one attempt.

    What every backend guarantees (tests/test_sandbox_contract.py checks it on each one):

    - `exec` kills the whole process tree on timeout or cancellation, not only the
      client call: an agent under test must not outlive its budget;
    - a timeout is a result, not an exception: `timed_out` is set, `exit_code` is None and
      what the command printed until then is kept;
    - each stream is capped at `OUTPUT_LIMIT_BYTES`, keeping head and tail around
      `TRUNCATION_MARKER`, with `truncated` set (rebench.sandbox.output).

    Errors (rebench.errors): `SandboxStartError` when the sandbox cannot be created or
    started, `SandboxDied` when a started one is gone, other `SandboxError`s for an
    infrastructure failure of one operation; a run meeting any of them ends as an
    infrastructure error. What the agent's own command does (a non-zero exit, a missing
    program) is never an exception: it is in the `ExecResult`.
    """

    paths: SandboxPaths

    async def start(self) -> None:
        """Create the sandbox; SandboxStartError if it cannot (then nothing of it is left running)."""
        ...

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
        """Run `cmd` (a string goes to `bash -c`) as `user` in `cwd` (relative: under the solution
        folder; default: the solution folder, or the home folder while there is none).

        Returns when the command's shell exits (a background child holding the output pipes
        does not hold the call) or at `timeout`, after killing its whole tree. Raises
        SandboxDied when the sandbox is gone or stops answering, SandboxError once it was
        stopped, LimitExceeded when the agent broke a limit the engine cannot
        enforce (Docker's disk watch; then every later agent command is refused). On
        cancellation the command's tree is killed before CancelledError propagates."""
        ...

    async def read_file(self, path: str) -> bytes:
        """The harness's own read (as root in a container: never on a path the agent chose; the
        agent's tools use `agent_read_file`). A file's bytes (relative paths are under the solution
        folder); FileNotFoundError if there is none, IsADirectoryError for a folder, SandboxError if
        the sandbox failed."""
        ...

    async def write_file(self, path: str, data: bytes, *, user: User = "agent", mode: int | None = None) -> None:
        """The harness's own write (as root in a container: never on a path the agent chose; the
        agent's tools use `agent_write_file`). Create or replace a file owned as `user` (missing
        folders are made); SandboxError
        if the sandbox failed."""
        ...

    async def copy_in(self, source_dir: str, dest: str, *, user: User = "agent", read_only: bool = False) -> None:
        """Copy a host directory's contents into the sandbox at `dest` (made if missing),
        leaving out `__pycache__`; `read_only` files cannot be changed by the agent.
        SandboxError if `source_dir` is not a folder or the sandbox failed."""
        ...

    async def agent_read_file(self, path: str) -> bytes:
        """Read a file with the agent's own rights (its uid and groups, in the sandbox): what the
        agent's `cat` could read, nothing more (rebench.sandbox.agent_files). Relative paths are
        under the solution folder. Raises the OSError the kernel gave (PermissionError,
        FileNotFoundError, IsADirectoryError; EFBIG past AGENT_FILE_LIMIT_BYTES)."""
        ...

    async def agent_write_file(self, path: str, data: bytes) -> None:
        """Create or truncate and write a file with the agent's own rights (missing folders made
        as the agent): what the agent's `tee` could write. Raises as `agent_read_file`."""
        ...

    async def agent_copy_in(self, source_dir: str, dest: str) -> None:
        """Copy a host folder's files and folders (no __pycache__) to `dest` with the agent's own
        rights. Raises as `agent_read_file`; EFBIG past AGENT_UPLOAD_LIMIT_BYTES."""
        ...

    async def copy_out(self, source: str, dest_dir: str, budget: SnapshotBudget | None = None) -> SnapshotReport:
        """Copy a sandbox directory's contents out to a fresh host directory (a snapshot),
        within `budget` (the attempt's, shared by its snapshots; None: the default cap),
        by the rules of `rebench.sandbox.snapshot`: no special files, nothing from outside.
        What was left out is in the report, not an exception; FileNotFoundError if `source`
        does not exist, SandboxError if the sandbox failed."""
        ...

    async def kill_agent_processes(self) -> int:
        """Kill every process the agent started (background ones included) and return how many,
        leaving the sandbox usable: the harness re-scores in it after the agent has ended, and
        nothing of the agent's may run beside that. Raises SandboxError if it cannot."""
        ...

    async def alive(self) -> bool:
        """Whether the sandbox is started and still there; never raises."""
        ...

    async def stop(self) -> None:
        """Kill everything the attempt started and remove the sandbox; never raises, may be
        called twice or on a sandbox that failed to start."""
        ...


@dataclass(frozen=True)
class SandboxBackend:
    """What an entry point of group `rebench.sandboxes` names (`rebench.sandbox.factory`):
    how to make one attempt's sandbox, and whether the backend can run here now."""

    create: Callable[[SandboxSpec, Any], Sandbox]
    """Build (not start) the attempt's sandbox for this environment; may raise SandboxStartError. The
    second argument is the environment (rebench.environments.registry.Environment), which this layer
    never looks into: the built-in backends read what they need of it from the spec (`image`,
    `python`), which rebench.sandboxes resolves before it calls `create`."""
    available: Callable[[], bool] = lambda: True
    """Whether the backend can run now (an engine answers); asked only to pick the default backend."""
    networks: frozenset[NetworkPolicy] = frozenset()
    """The network policies (rebench.network) the backend enforces; `rebench run --network` naming
    another is refused. Empty: it controls no network (its commands have the host's)."""
    check_network: Callable[[NetworkPolicy], None] = lambda _policy: None
    """Raise RebenchError (one line) when this host cannot enforce `policy` now; asked before a run."""
