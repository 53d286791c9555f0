"""Joining the Ray cluster before a campaign writes anything (`rebench run --executor ray`).

`ray.init` on an address where no cluster answers retries for minutes and prints its core's
connection warnings on stderr. So the harness first knocks on the address's port (a refused or
unanswered port is a one-line error at once), then joins within `--ray-timeout`, with Ray's own
output sent to a log file in the cache. A campaign's rows are written only after this succeeds.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from rebench.errors import RebenchError
from rebench.paths import cache_dir

DEFAULT_TIMEOUT_S = 30.0


def ray_log_path() -> Path:
    """Where Ray's output during the join goes (its core prints there, not on the user's terminal)."""
    folder = cache_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "ray-driver.log"


def _log_python_side() -> None:
    """Ray's Python loggers write to the log file too, instead of the stderr handler Ray installs
    on import."""
    logger = logging.getLogger("ray")
    if any(getattr(h, "rebench", False) for h in logger.handlers):
        return
    handler = logging.FileHandler(ray_log_path())
    handler.rebench = True  # type: ignore[attr-defined]
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for old in list(logger.handlers):  # Ray's own handler writes to stderr
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.propagate = False


def _host_port(address: str) -> tuple[str, int] | None:
    """`host:port` of a plain GCS address; None for forms this check leaves to Ray (`auto`, `ray://...`)."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    """A TCP connection to the head's port, or a one-line RebenchError naming the address."""
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__).lower()
        raise RebenchError(f"no Ray cluster answers at --ray-address {address} ({reason} within "
                           f"{timeout_s:g} s); start one with `ray start --head` or fix the address") from None


class _StderrTo:
    """File descriptor 2 goes to `path` while Ray joins: its C++ core writes there, past Python's
    sys.stderr. `keep()` leaves it there for a join still retrying in its thread, with sys.stderr
    moved to the terminal's descriptor so the harness's own messages still reach the user."""

    def __init__(self, path: Path) -> None:
        sys.stderr.flush()
        self.saved = os.dup(2)
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)

    def restore(self) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)

    def keep(self) -> None:
        sys.stderr.flush()
        sys.stderr = os.fdopen(self.saved, "w", buffering=1)


def join(ray: Any, address: str | None, timeout_s: float, env_vars: dict[str, str]) -> None:
    """`ray.init` within `timeout_s`, its output in `ray_log_path()`; a one-line RebenchError otherwise."""
    if address is not None:
        check_reachable(address, timeout_s)
    _log_python_side()
    failure: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, runtime_env={"env_vars": env_vars}, ignore_reinit_error=True,
                     logging_level="WARNING", log_to_driver=False, configure_logging=False)
        except BaseException as exc:  # reported by the caller's thread
            failure.append(exc)

    where = f"--ray-address {address}" if address is not None else "a Ray instance started on this machine"
    redirect = _StderrTo(ray_log_path())
    thread = threading.Thread(target=init, name="rebench-ray-init", daemon=True)
    try:
        thread.start()
        thread.join(timeout_s)
    except BaseException:  # Ctrl-C while joining: the terminal gets its stderr back
        redirect.keep()
        raise
    if thread.is_alive():  # still retrying: its output stays in the log; Ray's exit hook would wait on it
        redirect.keep()
        with contextlib.suppress(Exception):
            atexit.unregister(ray._private.worker.shutdown)
        raise RebenchError(f"no Ray cluster answers at {where} within {timeout_s:g} s "
                           f"(--ray-timeout; Ray's log: {ray_log_path()})")
    redirect.restore()
    if failure:
        exc = failure[0]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RebenchError(f"could not join the Ray cluster at {where}: {first} (Ray's log: {ray_log_path()})")
