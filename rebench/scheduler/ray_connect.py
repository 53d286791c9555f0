"""Joining the Ray cluster before a campaign writes anything (`rebench run --executor ray`).

`ray.init` on an address where no cluster answers retries for minutes and prints its core's
connection warnings on stderr. So the harness first knocks on the address's port (a refused or
unanswered port is a one-line error at once), then its driver process joins within
`--ray-timeout` (rebench.scheduler.ray_driver), with Ray's own output in a log file in the cache.
A campaign's rows are written only after this succeeds.
"""

from __future__ import annotations

import socket
from pathlib import Path

from rebench.errors import RebenchError
from rebench.paths import cache_dir

DEFAULT_TIMEOUT_S = 30.0


def ray_log_path() -> Path:
    """Where Ray's output during the join goes (its core prints there, not on the user's terminal)."""
    folder = cache_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / "ray-driver.log"


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
