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
import time
import uuid
from pathlib import Path

from rebench.sandbox.base import ExecResult, SandboxPaths, SandboxSpec, User, cap_output

MARKER_VAR = "REBENCH_SANDBOX_ID"
LOCAL_WARNING = (
    "the local backend does not isolate the agent: it can read held-out data and the reference "
    "solution. Use --backend docker for untrusted agents."
)


def _processes_with_marker(marker: str) -> list[int]:
    needle = f"{MARKER_VAR}={marker}".encode()
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


def _make_read_only(path: Path) -> None:
    targets = [path, *path.rglob("*")] if path.is_dir() else [path]
    for target in targets:
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

    async def start(self) -> None:
        for folder in (self.paths.home, self.paths.solution, self.paths.protected):
            Path(folder).mkdir(parents=True, exist_ok=True)
        helper_source = Path(__file__).resolve().parents[1] / "scoring" / "score_helper.py"
        Path(self.paths.helper).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(helper_source, self.paths.helper)
        _make_read_only(Path(self.paths.helper))
        self._started = True

    def _environment(self, extra: dict[str, str] | None) -> dict[str, str]:
        python_bin = str(Path(self.paths.python).parent)
        env = {
            "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": self.paths.home,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "REBENCH_HOME": self.paths.home,
            "REBENCH_SOLUTION": self.paths.solution,
            MARKER_VAR: self.marker,
        }
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
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd or self.paths.solution,
            env=self._environment(env),
            start_new_session=True,
        )
        timed_out = False
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            timed_out = True
            self._kill_group(proc.pid)
            stdout, stderr = await proc.communicate()
        except BaseException:
            self._kill_group(proc.pid)
            raise
        out, cut_out = cap_output(stdout)
        err, cut_err = cap_output(stderr)
        return ExecResult(
            exit_code=None if timed_out else proc.returncode,
            stdout=out,
            stderr=err,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            truncated=cut_out or cut_err,
        )

    @staticmethod
    def _kill_group(pgid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)

    def kill_all(self) -> int:
        """Kill every process carrying this sandbox's marker; returns how many were found."""
        killed = 0
        for _ in range(5):  # a fork loop can spawn while we kill; sweep until quiet
            pids = [p for p in _processes_with_marker(self.marker) if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed += len(pids)
            time.sleep(0.05)
        return killed

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
        target = self._host_path(dest)
        target.mkdir(parents=True, exist_ok=True)
        source = Path(source_dir)
        for item in source.iterdir():
            if item.name == "__pycache__":
                continue
            destination = target / item.name
            if item.is_dir():
                shutil.copytree(item, destination, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(item, destination)
            if read_only:
                _make_read_only(destination)

    async def copy_out(self, source: str, dest_dir: str) -> None:
        shutil.copytree(self._host_path(source), dest_dir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))

    async def alive(self) -> bool:
        return self._started and self.root.is_dir()

    async def stop(self) -> None:
        self.kill_all()
        if self.root.exists():
            _make_writable(self.root)
            shutil.rmtree(self.root, ignore_errors=True)
        self._started = False
