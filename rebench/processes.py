"""Whether a process of this machine still runs: shared by the leases of the scheduler, the
human supervisor's checks and resumable re-scoring runs, which all record a pid."""

from __future__ import annotations

import os


def pid_alive(pid: int | None) -> bool:
    """Whether a process of this machine with that id runs (a zombie does not)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours (the `start` that spawned it) is dead
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True
