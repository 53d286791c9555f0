"""The `local` backend: each attempt in its own folder on this machine.

It is NOT an isolation boundary. The agent runs as the same user as the
harness, so it can read held-out files, the reference solution and anything
else this user can read; "read-only" files are only chmod-protected. Use it for
development, CI of the harness itself and trusted agents; use the `docker`
backend to evaluate agents you do not trust.

What it does guarantee: commands start with a clean environment (no provider
keys inherited from the harness), and a timeout, a cancellation or `stop()`
kills every process the attempt started, found by a per-sandbox marker in the
process environment even when a process left its process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from rebench.errors import RebenchError, SandboxError
from rebench.harness_files import install_harness
from rebench.paths import cache_dir
from rebench.sandbox.agent_files import local_read, local_unpack, local_write, pack_folder
from rebench.sandbox.base import ExecResult, SandboxBackend, SandboxPaths, SandboxSpec, User
from rebench.sandbox.local_process import RunningCommand
from rebench.sandbox.snapshot import SnapshotBudget, SnapshotReport, copy_folder, default_budget

MARKER_VAR = "REBENCH_SANDBOX_ID"
COMMAND_MARKER_VAR = "REBENCH_EXEC_ID"
EXIT_GRACE_S = 0.2
"""After a command exits, how long its output is still read (a background child may hold
the pipes open; it keeps running, what it prints later is not captured). The Docker
backend's exec server follows the same rule."""
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
"""Where sandboxed commands find system programs (after the environment's virtualenv): an
environment's system-packages.txt must be installed there (the preflight checks it)."""
LOCAL_WARNING = (
    "the local backend does not isolate the agent: it can read held-out data and the reference "
    "solution, and reach whatever this host's network reaches. Use --backend docker for untrusted agents."
)


def _processes_with(variable: str) -> list[int]:
    """Processes whose environment holds `variable` (NAME=value)."""
    needle = variable.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _dead(pid: int) -> bool:
    """Whether `pid` is gone or a zombie (it runs nothing any more)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :][:1] in (b"Z", b"X")


def _kill_marked(variable: str, settle_s: float = 2.0) -> int:
    """SIGKILL every process (but this one) whose environment holds `variable`; returns how many.

    Returns only once what it killed has died (or after `settle_s`): SIGKILL takes effect when
    the target is next scheduled, which on a busy machine can be after kill() returns, and a
    caller such as stop() promises that nothing of the sandbox runs afterwards. Quiet means two
    sweeps 50 ms apart find nothing: one sweep can miss a process that a fork or an exec makes at
    that moment (seen under load: a background `nohup setsid sleep` outlived stop())."""
    killed = 0
    quiet = 0
    for _ in range(8):  # a fork loop can spawn while we kill; sweep until quiet
        pids = [p for p in _processes_with(variable) if p != os.getpid()]
        if not pids:
            quiet += 1
            if quiet == 2:
                break
            time.sleep(0.05)
            continue
        quiet = 0
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed += len(pids)
        deadline = time.monotonic() + settle_s
        while not all(_dead(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)
    return killed


def _copy_entries(source: Path, target: Path, root: str) -> list[Path]:
    """Copy `source`'s entries into `target` (made where missing); what was made at the top.

    A link that resolves inside `root` (the folder being copied) is copied as the link, as Docker's
    archive keeps it: following it would copy a loop such as `a -> .` without end. Any other link is
    followed, as before: an environment's assets may point at a cache; a snapshot with such a link is
    refused before it gets here (rebench.sandbox.snapshot_check)."""
    made: list[Path] = []
    for item in sorted(source.iterdir()):
        if item.name == "__pycache__":
            continue
        destination = target / item.name
        if destination.is_symlink():  # an earlier layer's link: replaced, not written through
            destination.unlink()
        resolved = os.path.realpath(item)
        if item.is_symlink() and (resolved == root or resolved.startswith(root + os.sep)):
            os.symlink(os.readlink(item), destination)
        elif item.is_dir():
            destination.mkdir(exist_ok=True)
            _copy_entries(item, destination, root)
            shutil.copystat(item, destination)
        else:
            shutil.copy2(item, destination)
        made.append(destination)
    return made


def _make_read_only(path: Path) -> None:
    targets = [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]
    for target in targets:
        if target.is_symlink():
            continue
        mode = target.stat().st_mode
        target.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _make_writable(path: Path) -> None:
    for target in [path, *path.rglob("*")]:
        with contextlib.suppress(OSError):
            target.chmod(target.stat().st_mode | stat.S_IWUSR)


class LocalSandbox:
    """An attempt folder with `home/`, `home/solution/` and `protected/`, and a python to run."""

    backend = "local"

    def __init__(self, spec: SandboxSpec, root: Path, python: str) -> None:
        self.spec = spec
        self.root = root
        self.marker = uuid.uuid4().hex
        home = root / "home"
        self.paths = SandboxPaths(
            home=str(home),
            solution=str(home / "solution"),
            protected=str(root / "protected"),
            helper=str(root / "rebench" / "score_helper.py"),
            python=python,
        )
        self._started = False
        self._stopped = False

    async def start(self) -> None:
        for folder in (self.paths.home, self.paths.solution, self.paths.protected):
            Path(folder).mkdir(parents=True, exist_ok=True)
        install_harness(Path(self.paths.helper).parent)  # the scoring helper and the environment kit
        self._started = True

    def _environment(self, extra: dict[str, str] | None) -> dict[str, str]:
        python_bin = str(Path(self.paths.python).parent)
        env = {
            "PATH": f"{python_bin}:{SYSTEM_PATH}",
            "HOME": self.paths.home,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "REBENCH_HOME": self.paths.home,
            "REBENCH_SOLUTION": self.paths.solution,
            "PYTHONPATH": str(Path(self.paths.helper).parent),  # the kit, for `python score.py` by hand
            MARKER_VAR: self.marker,
        }
        if self.spec.gpus:  # the devices the scheduler leased to this attempt, and no others
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.spec.gpus)
        env.update(self.spec.env)
        env.update(extra or {})
        env[MARKER_VAR] = self.marker
        return env

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
        if self._stopped:
            raise SandboxError(f"sandbox of attempt {self.spec.attempt_id} was stopped")
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        started = time.monotonic()
        command_marker = uuid.uuid4().hex
        environment = self._environment(env)
        environment[COMMAND_MARKER_VAR] = command_marker
        # Popen plus pidfd rather than asyncio's subprocess: on Python 3.11 its wait() does not
        # return while a background child still holds the pipes (`sleep 100 & echo started`).
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self._host_path(cwd) if cwd else self.paths.solution,
                env=environment,
                start_new_session=True,
            )
        except OSError as exc:  # no such program or folder: the command's failure, as a shell reports it
            return ExecResult(
                exit_code=127 if isinstance(exc, FileNotFoundError) else 126,
                stderr=f"rebench: cannot start command: {type(exc).__name__}: {exc}\n",
                duration_s=time.monotonic() - started,
            )
        run = RunningCommand(proc, stdin)
        timed_out = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    await run.exited.wait()
            except TimeoutError:
                timed_out = True
                self._kill_command(proc.pid, command_marker)
                await run.exited.wait()
            # A background child may still hold the pipes: read them for a short grace,
            # then stop listening. The child keeps running; its later output is not captured.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(EXIT_GRACE_S):
                    await run.pipes_closed()
        except BaseException:
            self._kill_command(proc.pid, command_marker)
            raise
        finally:
            run.close()
        out, cut_out = run.out.text()
        err, cut_err = run.err.text()
        return ExecResult(
            exit_code=None if timed_out else proc.returncode,
            stdout=out,
            stderr=err,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            truncated=cut_out or cut_err,
        )

    def _kill_command(self, pgid: int, command_marker: str) -> None:
        """Kill one command's tree: its process group and every process carrying its marker
        (which finds children that called setsid())."""
        self._kill_group(pgid)
        _kill_marked(f"{COMMAND_MARKER_VAR}={command_marker}")

    @staticmethod
    def _kill_group(pgid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)

    def kill_all(self) -> int:
        """Kill every process carrying this sandbox's marker; returns how many were found."""
        return _kill_marked(f"{MARKER_VAR}={self.marker}")

    async def kill_agent_processes(self) -> int:
        """Kill everything the attempt started, leaving the sandbox usable (re-scoring after the agent ends)."""
        return await asyncio.to_thread(self.kill_all)

    def _host_path(self, path: str) -> Path:
        return Path(path) if os.path.isabs(path) else Path(self.paths.solution) / path

    async def read_file(self, path: str) -> bytes:
        return self._host_path(path).read_bytes()

    async def write_file(self, path: str, data: bytes, *, user: User = "agent", mode: int | None = None) -> None:
        target = self._host_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if mode is not None:
            target.chmod(mode)

    async def copy_in(self, source_dir: str, dest: str, *, user: User = "agent", read_only: bool = False) -> None:
        if not Path(source_dir).is_dir():
            raise SandboxError(f"copy_in: {source_dir} is not a directory")
        target = self._host_path(dest)
        target.mkdir(parents=True, exist_ok=True)
        source = Path(source_dir)
        for destination in _copy_entries(source, target, os.path.realpath(source)):
            if read_only:
                _make_read_only(destination)

    # The agent's tools: the harness's user is the agent here (no isolation), same rules and limits.
    async def agent_read_file(self, path: str) -> bytes:
        return await asyncio.to_thread(local_read, self._host_path(path))

    async def agent_write_file(self, path: str, data: bytes) -> None:
        await asyncio.to_thread(local_write, self._host_path(path), data)

    async def agent_copy_in(self, source_dir: str, dest: str) -> None:
        archive = await asyncio.to_thread(pack_folder, Path(source_dir))
        await asyncio.to_thread(local_unpack, archive, self._host_path(dest))

    async def copy_out(self, source: str, dest_dir: str, budget: SnapshotBudget | None = None) -> SnapshotReport:
        budget = budget or default_budget()
        folder = self._host_path(source)
        if not folder.exists():
            raise FileNotFoundError(str(folder))
        return await asyncio.to_thread(copy_folder, folder, Path(dest_dir), budget)

    async def alive(self) -> bool:
        return self._started and self.root.is_dir()

    async def stop(self) -> None:
        self._stopped = True
        self.kill_all()
        if self.root.exists():
            _make_writable(self.root)
            shutil.rmtree(self.root, ignore_errors=True)
        self._started = False


def create_sandbox(spec: SandboxSpec, env: object = None) -> LocalSandbox:
    """A fresh attempt folder under the cache, running `spec.python` (rebench.sandboxes resolves it)."""
    if spec.keep_alive:
        raise RebenchError("the local backend cannot run human attempts: it isolates nothing from the expert; "
                           "use the docker backend")
    if spec.python is None:
        raise RebenchError(f"no python for {spec.environment!r}: create it with rebench.sandboxes.create_sandbox")
    work = cache_dir() / "work"
    work.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=f"attempt-{spec.attempt_id}-", dir=work))
    return LocalSandbox(spec, root, python=spec.python)


BACKEND = SandboxBackend(create=create_sandbox)
"""What the `local` entry point of group `rebench.sandboxes` names."""
