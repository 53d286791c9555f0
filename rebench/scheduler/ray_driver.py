"""The Ray driver runs in a child process of the harness, never in the harness itself.

Why a process of its own: Ray's core aborts the whole process (a C++ check, not an exception)
when it loses the head's GCS for longer than `gcs_rpc_server_reconnect_timeout_s`, and a Ray
instance that `ray.init` starts is tied to the thread that started it (its processes get a
parent-death signal when that thread ends). In a child whose main thread lives as long as the
campaign, the instance lives too; and when Ray aborts, only the child dies: the harness reads
the end of its pipe, ends the attempts in flight as infrastructure errors naming what was lost,
and stops the campaign so that `rebench run --resume ID` goes on.

The two sides speak over a socket pair with `multiprocessing.connection` (length-framed
pickles of plain rows; both ends are this harness). The harness sends `submit`, `cancel` and
`stop`; the driver answers `joined` or `failed` once, then `batch`, `end` and `lost` per attempt.
An attempt whose task failed while the head does not answer is not reported: Ray's own reconnect
timeout decides whether the head is back (the attempt is then `lost`, and retried) or gone (the
driver aborts, and every attempt in flight is `cluster_lost`). Ray's output goes to the driver's
log file, never to the user's terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rebench.errors import RebenchError
from rebench.scheduler.ray_auth import auth_refusal, token_mode

STOP_WAIT_S = 20.0
"""How long a driver asked to stop may take (Ray's shutdown) before it is killed."""
HEAD_WAIT_S = 1.0
"""How often a driver whose attempt failed checks whether the head answers again."""


class _Refused(Exception):
    """The cluster's token authentication refused the driver (the message says what to do)."""


class RayDriver:
    """The harness's side: one driver process per harness, shared by its attempts."""

    def __init__(self, address: str | None, timeout_s: float, env_vars: dict[str, str], log_path: Path) -> None:
        self.address = address
        self.timeout_s = timeout_s
        self.env_vars = env_vars
        self.log_path = log_path
        self.where = f"--ray-address {address}" if address is not None else "a Ray instance started on this machine"
        self.lost: str | None = None
        """Set when the cluster (or the driver) is gone: why, in one line."""
        self._queues: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue[tuple[str, Any]]]] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._conn: Connection | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._offset = 0
        """Where this driver's part of the log starts."""
        self.resources: dict[str, float] = {}
        """The cluster's total resources when the driver joined, as Ray reports them (`CPU`, `GPU`,
        `memory` in bytes, ...)."""

    # ------------------------------------------------------------ joining

    def start(self) -> None:
        """Start the driver and wait until it joined, within `timeout_s`; a one-line RebenchError otherwise
        (nothing is left running then). A cluster that refuses a driver without a token is tried once
        more with RAY_AUTH_MODE=token, when the user set no mode and a token is at hand (rebench.scheduler.
        ray_auth: joining an open cluster in token mode would refuse the workers' replies)."""
        deadline = time.monotonic() + self.timeout_s
        env: dict[str, str] | None = dict(os.environ)
        while env is not None:
            self._spawn(env)
            try:
                self._await_join(deadline)
            except _Refused as refused:
                self._kill()
                env = token_mode(env)
                if env is None:
                    raise RebenchError(f"the Ray cluster at {self.where} refused the driver: {refused}") from None
                self._closing = False
                continue
            except BaseException:
                self._kill()
                raise
            threading.Thread(target=self._read, name="rebench-ray-driver", daemon=True).start()
            return

    def _spawn(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair()
        log = self.log_path.open("ab")
        self._offset = log.tell()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "rebench.scheduler.ray_driver", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True)
        finally:
            theirs.close()
            log.close()
        self._conn = Connection(ours.detach())
        self._conn.send(("join", {"address": self.address, "env_vars": self.env_vars}))

    def _await_join(self, deadline: float) -> None:
        assert self._conn is not None and self._proc is not None
        while time.monotonic() < deadline:
            refused = auth_refusal(self.log_path, self._offset)
            if refused:
                raise _Refused(refused)
            if self._conn.poll(0.2):
                try:
                    kind, detail = self._conn.recv()
                except (EOFError, OSError):
                    break
                if kind == "joined":
                    self.resources = dict(detail or {})
                    return
                refused = auth_refusal(self.log_path, self._offset)
                if refused:
                    raise _Refused(refused)
                raise RebenchError(f"could not join the Ray cluster at {self.where}: {detail} "
                                   f"(Ray's log: {self.log_path})")
            if self._proc.poll() is not None:
                break
        if self._proc.poll() is not None:
            raise RebenchError(f"could not join the Ray cluster at {self.where}: Ray's driver process ended "
                               f"({_exit_text(self._proc.returncode)}; Ray's log: {self.log_path})")
        raise RebenchError(f"no Ray cluster answers at {self.where} within {self.timeout_s:g} s "
                           f"(--ray-timeout; Ray's log: {self.log_path})")

    # ------------------------------------------------------------ attempts

    def submit(self, attempt_id: int, payload: dict[str, Any], options: dict[str, Any]
               ) -> asyncio.Queue[tuple[str, Any]]:
        """Hand the attempt to Ray; what comes back arrives on the returned queue: ("batch", rows),
        ("end", None), ("lost", why) for this attempt, ("cluster_lost", why) for all."""
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        with self._lock:
            if self.lost is not None:
                queue.put_nowait(("cluster_lost", self.lost))
                return queue
            self._queues[attempt_id] = (asyncio.get_running_loop(), queue)
        self._send(("submit", attempt_id, payload, options))
        return queue

    def forget(self, attempt_id: int) -> None:
        with self._lock:
            self._queues.pop(attempt_id, None)

    def cancel(self, attempt_id: int) -> None:
        """Stop the attempt's Ray task (its worker process, and with it its sandbox)."""
        self.forget(attempt_id)
        self._send(("cancel", attempt_id, None, None))

    def _send(self, message: tuple[Any, ...]) -> None:
        if self._conn is None:
            return
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._conn.send(message)

    def _deliver(self, attempt_id: int, item: tuple[str, Any]) -> None:
        with self._lock:
            target = self._queues.get(attempt_id)
        if target is not None:
            loop, queue = target
            with contextlib.suppress(RuntimeError):  # its loop has closed
                loop.call_soon_threadsafe(queue.put_nowait, item)

    def _read(self) -> None:
        assert self._conn is not None
        while True:
            try:
                kind, attempt_id, detail = self._conn.recv()
            except (EOFError, OSError):
                break
            self._deliver(attempt_id, (kind, detail))
        if not self._closing:
            code = self._proc.wait() if self._proc is not None else None
            self._lose(f"Ray's driver process ended ({_exit_text(code)}): {gcs_loss(self.log_path, self._offset)} "
                       f"(Ray's log: {self.log_path})")

    def _lose(self, why: str) -> None:
        with self._lock:
            self.lost = self.lost or why
            waiting = list(self._queues.items())
        for attempt_id, _ in waiting:
            self._deliver(attempt_id, ("cluster_lost", self.lost))

    # ------------------------------------------------------------ the end

    def close(self) -> None:
        """Stop the driver (and a Ray instance it started): asked first, killed after STOP_WAIT_S."""
        self._closing = True
        self._send(("stop", 0, None, None))
        if self._proc is not None:
            try:
                self._proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self._kill()
        if self._conn is not None:
            self._conn.close()

    def _kill(self) -> None:
        self._closing = True
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait()


def gcs_loss(log: Path, offset: int) -> str:
    """What Ray's log (after `offset`) says of the lost head, in a few words."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        lines = []
    said = [line for line in lines if "Failed to connect to GCS" in line]
    if not said:
        return "the head stopped answering, or the driver was killed"
    text = said[-1][said[-1].index("Failed to connect to GCS"):]
    return f"the head's GCS stopped answering (Ray: {text.split('.')[0]})"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"signal {-code}" if code < 0 else f"exit status {code}"


# ---------------------------------------------------------------- the driver process


def _head_answers(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


class _Driver:
    """The child's side: joins, then runs each submitted attempt's streaming task."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.generators: dict[int, Any] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}

    def send(self, *message: Any) -> None:
        with self.send_lock:
            self.conn.send(message)

    async def attempt(self, ray: Any, attempt_id: int, payload: dict[str, Any], options: dict[str, Any]) -> None:
        from rebench.scheduler.ray_worker import run_on_worker

        generator = ray.remote(run_on_worker).options(**options).remote(payload)
        self.generators[attempt_id] = generator
        try:
            async for ref in generator:
                self.send("batch", attempt_id, await ref)
            self.send("end", attempt_id, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            gcs = ray.get_runtime_context().gcs_address
            while not _head_answers(gcs):  # the head is gone: Ray's own timeout decides (the driver aborts)
                await asyncio.sleep(HEAD_WAIT_S)
            self.send("lost", attempt_id, f"{type(exc).__name__}: {_first_line(exc)}")
        finally:
            self.generators.pop(attempt_id, None)

    async def serve(self, ray: Any) -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[str, int, Any, Any]] = asyncio.Queue()

        def read() -> None:
            while True:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):  # the harness is gone
                    message = ("stop", 0, None, None)
                loop.call_soon_threadsafe(inbox.put_nowait, message)
                if message[0] == "stop":
                    return

        threading.Thread(target=read, name="rebench-ray-inbox", daemon=True).start()
        while True:
            kind, attempt_id, payload, options = await inbox.get()
            if kind == "submit":
                self.tasks[attempt_id] = asyncio.create_task(self.attempt(ray, attempt_id, payload, options))
            elif kind == "cancel":
                generator = self.generators.get(attempt_id)
                if generator is not None:
                    with contextlib.suppress(Exception):
                        ray.cancel(generator, force=True)
                task = self.tasks.pop(attempt_id, None)
                if task is not None:
                    task.cancel()
            elif kind == "stop":
                for generator in list(self.generators.values()):
                    with contextlib.suppress(Exception):
                        ray.cancel(generator, force=True)
                return


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def main(fd: int) -> None:
    conn = Connection(fd)
    _, settings = conn.recv()
    import ray

    address = settings["address"]
    try:
        ray.init(address=address or "local", runtime_env={"env_vars": settings["env_vars"]}, ignore_reinit_error=True,
                 logging_level=logging.WARNING, log_to_driver=False,
                 include_dashboard=False if address is None else None)  # a local instance needs none
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {_first_line(exc)}"))
        return
    conn.send(("joined", {str(k): float(v) for k, v in ray.cluster_resources().items()}))
    driver = _Driver(conn)
    asyncio.run(driver.serve(ray))
    ray.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]))
