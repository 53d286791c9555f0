"""Commands in an attempt's container: each one a request to the exec server inside, run as the
agent, the scorer or root; a scorer's command runs with the agent's cgroup frozen from the host."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import time
from typing import Any

from rebench.errors import LimitExceeded, SandboxDied, SandboxError
from rebench.sandbox.base import ExecResult, SandboxPaths, SandboxSpec, User
from rebench.sandbox.channel import ExecChannel, decode_capture
from rebench.sandbox.docker.cgroups import AgentCgroup, CgroupError
from rebench.sandbox.docker.disk import SCORING_TMP
from rebench.sandbox.docker.files import in_solution
from rebench.sandbox.docker.network import AttemptNetwork
from rebench.sandbox.output import OUTPUT_LIMIT_BYTES

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
_REPLY_MARGIN_S = 30.0
"""How long past a command's own timeout we wait for the server before calling the sandbox dead."""


class ContainerCommands:
    """The command half of DockerSandbox (which sets these attributes when it starts)."""

    spec: SandboxSpec
    paths: SandboxPaths
    breach: str | None
    _channel: ExecChannel | None
    _network: AttemptNetwork | None
    _cgroup: AgentCgroup | None
    _agent_uid: int

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
            **({"REBENCH_SUBJECT_USER": SUBJECT_USER, "TMPDIR": SCORING_TMP} if user == "scorer" else {}),
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
                async with asyncio.timeout(wait):
                    result: dict[str, Any] = await asyncio.shield(reply)
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
        shared = ["/tmp", "/var/tmp", "/dev/shm", SCORING_TMP]
        return [{"user": SUBJECT_USER, "dirs": [*shared, f"/home/{SUBJECT_USER}", self.paths.home]},
                {"user": "scorer", "dirs": shared}]

    async def _kill(self, request_id: int) -> None:
        """Kill a command's tree after the caller gave up on it (cancelled, or no reply)."""
        channel = self._channel
        if channel is None or not channel.is_open:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await asyncio.shield(channel.request({"op": "kill", "target": request_id}))
