"""CPU time of a process tree, for scorers that charge the agent's code for everything it starts
(stdlib only, like the helper; Linux).

`ProcessTree` is every process descended from the scorer that was not already its child: while it
is open the scorer is a child subreaper, so a helper that double-forks or calls setsid stays in
the tree. Its CPU time sums each process's CPU clock (all threads, exited ones included), the CPU
time of children reaped inside the tree (tick counters) and that of children the scorer reaped
itself (getrusage). No cgroup is used, so this works the same on cgroup v1 and v2 and in
containers. `charged_ms` floors the CPU time by the wall time per usable core (CPU affinity and
the cgroup quota), so work moved off the CPU (sleeps, waits) is not free either.

A parent that ignores SIGCHLD (or sets SA_NOCLDWAIT) has its children reaped by the kernel with
their CPU time added to no one. `guard_sigchld`, run in the confined child before the agent's code,
installs a seccomp filter (inherited by everything it starts, impossible to remove) that stops any
change to SIGCHLD's action: with EPERM (Optimize a Kernel), or, with `refuse=False`, as a call that
succeeds without effect (so libraries that install a SIGCHLD handler, such as PyTorch's DataLoader
with worker processes, keep working while SIGCHLD keeps its default action). Every system call of
another ABI (32-bit, x32) fails with ENOSYS.

Used by triton_cumsum's and optimize_llm_foundry's scorers (see their READMEs, "How the timing is
kept honest").
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import platform
import resource
import signal
import struct
import threading
import time

_perf_counter = time.perf_counter
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _cgroup_quota_cores(root: str = "/sys/fs/cgroup") -> int | None:
    """Whole CPUs allowed by this cgroup's CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), or None."""
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
                                    ("cpu,cpuacct/cpu.cfs_quota_us", "cpu,cpuacct/cpu.cfs_period_us")):
        try:
            with open(os.path.join(root, quota_file), encoding="ascii") as handle:
                fields = handle.read().split()
            if period_file is not None:
                with open(os.path.join(root, period_file), encoding="ascii") as handle:
                    fields = fields[:1] + handle.read().split()[:1]
            quota, period = fields[0], fields[1]
        except (OSError, IndexError):
            continue
        if quota in ("max", "-1"):
            return None
        with contextlib.suppress(ValueError, ZeroDivisionError):
            return max(1, math.ceil(int(quota) / int(period)))
    return None


def usable_cores(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota (v1 or v2)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_quota_cores(cgroup_root)
    return max(1, min(cores, quota) if quota else cores)


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (field 3 onwards), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_cpu(pid: int) -> tuple[float, float]:
    """(CPU seconds of process `pid`, all its threads, live and exited; CPU seconds of the children
    it has reaped). The first comes from the process's CPU clock (clock_getcpuclockid's encoding:
    nanoseconds, readable for any process), or its tick counters where that clock is missing; the
    second exists only as tick counters. Zeros once the process is gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0, 0.0
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    try:
        own = time.clock_gettime(((~pid) << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    except OSError:
        own = (utime + stime) / CLOCK_TICKS
    return own, (cutime + cstime) / CLOCK_TICKS


def _children(pid: int) -> list[int]:
    """Child processes of `pid` (zombies included), from /proc/PID/task/*/children."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError, ValueError), \
                open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
            found.extend(int(child) for child in handle.read().split())
    return found


def _children_by_scan(pid: int) -> list[int]:
    """The same, on kernels without /proc/PID/task/*/children: every process's parent, read."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _set_child_subreaper(on: bool) -> bool:
    """Make this process the one that orphans below it are reparented to; returns the old setting."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = ctypes.c_int(0)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"PR_SET_CHILD_SUBREAPER: {os.strerror(ctypes.get_errno())}")
    return bool(before.value)


class ProcessTree:
    """Every process descended from this one that was not its child before: the solution's
    worker and whatever it starts. While it is open this process is a child subreaper, so a
    helper that double-forks or calls setsid is reparented here, not to init, and stays in the
    tree; children reaped here are counted through getrusage, children reaped inside the tree
    through their reaper's counters."""

    def __init__(self) -> None:
        self._root = os.getpid()
        proc_children = os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children")
        self._list_children = _children if proc_children else _children_by_scan
        self._before = set(self._list_children(self._root))
        self._subreaper_before = _set_child_subreaper(True)
        self.largest = 0

    def pids(self) -> list[int]:
        found: list[int] = []
        todo = [pid for pid in self._list_children(self._root) if pid not in self._before]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(self._list_children(pid))
        self.largest = max(self.largest, len(found))
        return found

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU time spent so far by the tree's processes, live, exited or reaped: (known to the
        microsecond or better, known only in ticks). The second part is the CPU time of children
        reaped inside the tree, which Linux reports in ticks (1/CLK_TCK s); see cpu_spent."""
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        precise, ticks = usage.ru_utime + usage.ru_stime, 0.0
        for pid in self.pids():
            own, reaped = process_cpu(pid)
            precise += own
            ticks += reaped
        return precise, ticks

    @staticmethod
    def cpu_spent(before: tuple[float, float], after: tuple[float, float]) -> float:
        """CPU seconds between two readings of cpu_seconds. Tick counters are truncated, so when
        they moved the difference may be short by up to a tick: one tick more is charged then,
        an upper bound rather than a lower one (single-process solutions never pay it)."""
        ticks = after[1] - before[1]
        return after[0] - before[0] + ticks + (1 / CLOCK_TICKS if ticks else 0.0)

    def kill(self) -> int:
        """SIGKILL every process of the tree, again and again as a dying parent's children are
        reparented here, and reap those that were; returns how many were signalled."""
        killed: set[int] = set()
        deadline = _perf_counter() + 10
        while (pids := self.pids()) and _perf_counter() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
            for pid in self._list_children(self._root):
                if pid not in self._before:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)
            time.sleep(0.005)
        return len(killed)

    def close(self) -> None:
        _set_child_subreaper(self._subreaper_before)


def charged_ms(timer: str, wall_s: float, cpu_s: float, cores: int, queued_s: float = 0.0) -> float:
    """Milliseconds charged: wall time, or CPU time floored by wall time per usable core.

    `queued_s`: how long the thread that ran the call waited for a CPU while it was ready to run
    (`runqueue_wait_s`), which the floor leaves out. On a busy machine that wait is other
    processes' use of the cores, not work the solution moved elsewhere: without it the floor, not
    the CPU time, sets the charge once the load passes the cores, and the score follows the load.
    Time the thread spent blocked (sleeping, waiting on another process or the kernel) stays in."""
    if timer == "wall":
        return wall_s * 1000
    if timer == "cpu":
        return max(cpu_s, max(wall_s - queued_s, 0.0) / cores) * 1000
    raise ValueError(f"unknown timer {timer!r}; allowed: 'wall', 'cpu'")


def runqueue_wait_s(pid: int, tid: int) -> float | None:
    """Seconds thread `tid` of `pid` has spent ready to run but waiting for a CPU (the kernel's
    schedstat run_delay); None where the kernel does not report it. The kernel keeps it: the
    thread can make it grow only by being ready while the cores are busy (with its own charged
    threads or with other processes), never by moving work off its CPU."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


# -- the SIGCHLD guard (seccomp) -------------------------------------------------------------------
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
# (audit arch, rt_sigaction's number) for the architectures the images are built for
_ARCHES = {"x86_64": (0xC000003E, 13), "aarch64": (0xB7 | 0xC0000000, 134)}
_RET_ALLOW, _RET_ERRNO, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050000, 1, 38


def sigchld_guard_program(machine: str, *, refuse: bool = True) -> bytes:
    """A seccomp filter that stops rt_sigaction(SIGCHLD, new action): with EPERM when `refuse`, else
    as a call that returns 0 without effect; every system call of another ABI (32-bit, x32) fails
    with ENOSYS. It allows everything else."""
    arch, rt_sigaction = _ARCHES[machine]
    deny = _RET_ERRNO | (_EPERM if refuse else 0)
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    return b"".join([
        op(load, 4),                            # 0: arch
        op(jeq, arch, 1, 0),                    # 1
        op(ret, _RET_ERRNO | _ENOSYS),          # 2: another ABI
        op(load, 0),                            # 3: system call number
        op(jge, 0x40000000, 0, 1),              # 4: x32 numbers (x86-64)
        op(ret, _RET_ERRNO | _ENOSYS),          # 5
        op(jeq, rt_sigaction, 0, 6),            # 6: not rt_sigaction: allow (13)
        op(load, 16),                           # 7: signal number (low half of args[0])
        op(jeq, signal.SIGCHLD, 0, 4),          # 8: another signal: allow
        op(load, 24),                           # 9: new action pointer, low half
        op(jeq, 0, 0, 3),                       # 10: set: deny (14)
        op(load, 28),                           # 11: high half
        op(jeq, 0, 0, 1),                       # 12: set: deny
        op(ret, _RET_ALLOW),                    # 13
        op(ret, deny),                          # 14
    ])


def guard_sigchld(*, refuse: bool = True) -> str:
    """Install the SIGCHLD guard for this process and all it starts; 'active' or why not."""
    machine = platform.machine()
    if machine not in _ARCHES:
        return f"unavailable: no filter for {machine}"
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    program = sigchld_guard_program(machine, refuse=refuse)
    filters = ctypes.create_string_buffer(program, len(program))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = Program(len(program) // 8, ctypes.addressof(filters))
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"unavailable: no_new_privs: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        return f"unavailable: seccomp: {os.strerror(ctypes.get_errno())}"
    return "active"
