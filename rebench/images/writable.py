"""Which paths of a running container the agent can write: none that root or the scorer
executes, loads or trusts may be among them.

`agent_writable(sandbox)` walks the whole file tree of a started Docker sandbox as the agent
(uid, gid and groups; `os.access`, so the kernel decides) and returns every file or folder the
agent may write outside its own places (`AGENT_PLACES`) and the explicit `EXCEPTIONS`. Any
environment image can be checked this way (tests/adversarial/test_agent_file_tools.py checks
the base image and triton_cumsum's)."""

from __future__ import annotations

import json
from typing import Protocol

from rebench.sandbox.base import ExecResult, User

AGENT_PLACES = ("/home/agent", "/tmp", "/dev/shm")
"""The agent's own: its home (the solution in it) and the scratch folders every user shares."""
EXCEPTIONS: dict[str, str] = {
    "/run/rebench-task/task.sock": "the `task` command's socket (human attempts, installed agents): meant for "
                                   "the agent, "
                                   "the exec server checks each caller's uid (SO_PEERCRED)",
}
"""Writable paths that are meant for the agent, each with the reason."""
SKIPPED = ("/proc", "/sys", "/dev")
"""Kernel file systems: their writable entries (/dev/null, a process's own /proc files) are no file
anything trusted loads; /dev/shm is one of AGENT_PLACES."""

WALK_SOURCE = r"""
import json, os, stat, sys
allowed, skipped = json.loads(sys.argv[1]), json.loads(sys.argv[2])
found = []
def inside(path, roots):
    return any(path == r or path.startswith(r + "/") for r in roots)
for folder, dirs, files in os.walk("/", onerror=lambda e: None):
    dirs[:] = sorted(d for d in dirs if not inside(os.path.join(folder, d), allowed + skipped))
    for name in [""] + sorted(files):
        path = os.path.join(folder, name) if name else folder
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                continue
        except OSError:
            continue
        if os.access(path, os.W_OK):
            found.append(path)
print(json.dumps(found))
"""


class Runs(Protocol):
    async def exec(self, cmd: str | list[str], *, user: User = "agent", timeout: float | None = None,
                   env: dict[str, str] | None = None, cwd: str | None = None,
                   stdin: bytes | None = None) -> ExecResult: ...


async def agent_writable(sandbox: Runs, *, timeout: float = 300.0) -> list[str]:
    """Paths the agent may write outside AGENT_PLACES and EXCEPTIONS, walking as the agent."""
    result = await sandbox.exec(["/usr/bin/python3", "-I", "-S", "-c", WALK_SOURCE, json.dumps(list(AGENT_PLACES)),
                                 json.dumps(list(SKIPPED))], user="agent", cwd="/", timeout=timeout)
    if not result.ok or result.truncated:
        raise RuntimeError(f"the walk as the agent failed (exit {result.exit_code}): {result.stderr[-500:]}")
    found: list[str] = json.loads(result.stdout)
    return [path for path in found if path not in EXCEPTIONS]
