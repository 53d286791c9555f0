"""Scoring for "Optimize a Kernel": time `prefix_sum` from the solution folder.

Called by the rebench scoring helper as `score(ctx)`; run directly
(`python score.py`) it prints the same result without logging it.

Raw score = ln(milliseconds per call), lower is better. A wrong answer, an
exception or a call over the per-call timeout makes the score invalid (None).

The solution runs in a child process (kernel_worker.py), started through the
helper's confinement: this process generates the inputs, computes the expected
outputs and keeps the clock, so the solution's code cannot patch the check or
the timer, as it could if it were imported here.

The `paper` profile times wall-clock milliseconds from the call to its return
after CUDA synchronize. The `tiny` profile (`timer = "cpu"`) charges the CPU
time the child spends from before the input is written until the result is
copied out, so a busy shared machine, which stretches wall time but not work,
does not move the score. Work hidden in another process would not show in that
CPU time, so wall time divided by the cores the scorer may use is a floor.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import select
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


class CallTimeout(Exception):
    pass


def reference_prefix_sum(x: np.ndarray) -> np.ndarray:
    """The definition, in plain NumPy: include x[j] when an odd number of positives precede it."""
    is_positive = (x > 0).astype(np.int64)
    positives_before = np.cumsum(is_positive) - is_positive
    included = x.astype(np.int64) * (positives_before % 2)
    return np.cumsum(included).astype(np.int32)


def random_input(n: int, generator: np.random.Generator) -> np.ndarray:
    return generator.integers(-10, 10, size=n, dtype=np.int32)


def check_output(expected: np.ndarray, actual: np.ndarray) -> str | None:
    """Why `actual` is not exactly `expected`, or None when it is (the child has checked the
    result's type, shape, dtype and device already)."""
    if actual.shape != expected.shape:
        return f"wrong shape: got {actual.shape}, expected {expected.shape}"
    if not np.array_equal(actual, expected):
        wrong = int(np.count_nonzero(actual != expected))
        return f"wrong values at {wrong} of {expected.size} positions"
    return None


def aggregate_ms(times_ms: list[float]) -> float:
    """One timed call is used as is (paper); several are reduced by the median (tiny)."""
    return times_ms[0] if len(times_ms) == 1 else statistics.median(times_ms)


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup v2 CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as handle:
            quota, period = handle.read().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


_perf_counter = time.perf_counter
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float:
    """CPU time of process `pid` so far, all its threads: per-thread nanosecond counters
    (schedstat), but never less than the process-wide tick counter, which also keeps the
    time of threads that have exited, less its resolution."""
    threads = 0.0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError), \
                    open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as handle:
                threads += int(handle.read().split()[0]) / 1e9
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        ticks = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (OSError, ValueError, IndexError):
        return threads
    return max(threads, ticks - 2 / _CLOCK_TICKS)


def call_ms(timer: str, wall_s: float, cpu_s: float, cores: int) -> float:
    """Milliseconds charged for one call: wall time, or CPU time floored by wall time per usable core."""
    if timer == "wall":
        return wall_s * 1000
    if timer == "cpu":
        return max(cpu_s, wall_s / cores) * 1000
    raise ValueError(f"unknown timer {timer!r}; allowed: 'wall', 'cpu'")


class WorkerFailed(Exception):
    """The solution's process died or broke the protocol."""


class SolutionError(Exception):
    """prefix_sum raised."""


class KernelWorker:
    """The solution, in a child process (see kernel_worker.py): this process keeps the inputs,
    the expected outputs and the clock, none of which the solution's code can reach."""

    def __init__(self, ctx: dict[str, Any], device: str, capacity: int, limit_s: float) -> None:
        source = (Path(__file__).resolve().parent / "kernel_worker.py").read_text(encoding="utf-8")
        self._input_fd, self._output_fd = os.memfd_create("rebench-input"), os.memfd_create("rebench-output")
        for fd in (self._input_fd, self._output_fd):
            os.ftruncate(fd, capacity * 4)
        self._input = mmap.mmap(self._input_fd, capacity * 4)
        self._output = mmap.mmap(self._output_fd, capacity * 4)
        to_child, self._to_child = os.pipe()
        self._from_child, from_child = os.pipe()
        threads = int(ctx.get("torch_threads") or 0)  # 0: leave PyTorch's default
        command = [*ctx.get("confine_command", []), sys.executable, "-c", source, str(ctx["solution"]), device,
                   str(threads), str(to_child), str(from_child), str(self._input_fd), str(self._output_fd),
                   str(capacity)]
        self.proc = subprocess.Popen(command, pass_fds=(to_child, from_child, self._input_fd, self._output_fd),
                                     cwd=str(ctx["solution"]), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        for fd in (to_child, from_child):
            os.close(fd)
        self._buffer = b""
        self._output_lines: list[bytes] = []
        self.first_line: bytes | None = None
        self._drain = threading.Thread(target=self._read_output, daemon=True)
        self._drain.start()
        try:
            reply = self._receive(max(limit_s, 60.0))
        except (WorkerFailed, CallTimeout):
            self.close()
            raise
        if "error" in reply:
            self.close()
            raise WorkerFailed(str(reply["error"]))

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.first_line is None:
                self.first_line = line
            self._output_lines.append(line)
            del self._output_lines[:-100]

    @property
    def confined(self) -> bool:
        """Whether the confinement launcher reported Landlock active (its first line, which
        the solution's own output cannot precede)."""
        return (self.first_line or b"").startswith(b"rebench-confine: active")

    def output_tail(self) -> str:
        return b"".join(self._output_lines).decode("utf-8", errors="replace")[-2000:]

    def _send(self, message: dict[str, Any]) -> None:
        try:
            os.write(self._to_child, json.dumps(message).encode() + b"\n")
        except BrokenPipeError as exc:
            raise WorkerFailed(self._died()) from exc

    def _receive(self, timeout_s: float) -> dict[str, Any]:
        deadline = _perf_counter() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - _perf_counter()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise CallTimeout(f"a call took longer than {timeout_s:g} s")
            chunk = os.read(self._from_child, 65536)
            if not chunk:
                raise WorkerFailed(self._died())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _died(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        self._drain.join(timeout=2)
        return f"the solution's process exited with {code}: {self.output_tail()[-600:]}"

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.proc.pid)

    def load(self, x: np.ndarray) -> None:
        np.frombuffer(self._input, dtype=np.int32, count=x.size)[:] = x
        self._send({"load": x.size})
        self._expect("loaded", 60.0)

    def call(self, limit_s: float) -> None:
        self._send({"go": True})
        self._expect("done", limit_s)

    def fetch(self, n: int, limit_s: float) -> tuple[np.ndarray | None, str | None]:
        """The call's result as an int32 array, or the reason there is none."""
        self._send({"fetch": True})
        reply = self._receive(limit_s)
        if "problem" in reply:
            return None, str(reply["problem"])
        if "ok" not in reply:
            raise WorkerFailed(f"unexpected reply {str(reply)[:200]}")
        return np.frombuffer(self._output, dtype=np.int32, count=n).copy(), None

    def _expect(self, key: str, timeout_s: float) -> None:
        reply = self._receive(timeout_s)
        if "error" in reply:
            raise SolutionError(str(reply["error"]))
        if key not in reply:
            raise WorkerFailed(f"unexpected reply {str(reply)[:200]}")

    def close(self) -> None:
        """End the child (killing it if it does not stop: a timed-out call may still run)."""
        with contextlib.suppress(OSError):
            os.write(self._to_child, b"\n")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child, self._input_fd, self._output_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._drain.join(timeout=2)
        self._input.close()
        self._output.close()


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    device = str(ctx["device"])
    n = int(ctx["n_elements"])
    check_n = int(ctx["check_elements"])
    limit = float(ctx["call_timeout_s"])
    generator = np.random.Generator(np.random.PCG64(int.from_bytes(os.urandom(8), "little")))
    timer = str(ctx.get("timer", "wall"))
    if timer not in ("wall", "cpu"):
        raise ValueError(f"unknown timer {timer!r}; allowed: 'wall', 'cpu'")
    cores = usable_cores()
    try:
        worker = KernelWorker(ctx, device, max(n, check_n), limit)
    except CallTimeout:
        return {"raw": None, "message": {"timeout": True, "error": "importing solution.py timed out"}}
    except WorkerFailed as exc:
        return {"raw": None, "message": {"error": str(exc)[:1000]}}
    try:
        small = random_input(check_n, generator)
        worker.load(small)
        worker.call(limit)
        actual, problem = worker.fetch(check_n, limit)
        if actual is not None:
            problem = check_output(reference_prefix_sum(small), actual)
        if problem:
            return {"raw": None, "message": {"correct": False, "error": f"length {check_n}: {problem}"}}
        for _ in range(int(ctx["warmup_calls"])):
            worker.load(random_input(n, generator))
            worker.call(limit)
        times_ms = []
        for _ in range(int(ctx["timed_calls"])):
            x = random_input(n, generator)
            expected = reference_prefix_sum(x)
            # CPU time counts from before the input exists, so no work can be done ahead of the call,
            # and until the result is copied out, so none can be left for later.
            cpu_before = worker.cpu_seconds()
            worker.load(x)
            started = _perf_counter()
            worker.call(limit)
            returned = _perf_counter()
            actual, problem = worker.fetch(n, limit)
            fetched = _perf_counter()
            cpu_s = worker.cpu_seconds() - cpu_before
            wall_s = returned - started if timer == "wall" else fetched - started
            times_ms.append(call_ms(timer, wall_s, cpu_s, cores))
            if actual is not None:
                problem = check_output(expected, actual)
            if problem:
                return {"raw": None, "message": {"correct": False, "error": f"length {n}: {problem}"}}
    except CallTimeout as exc:
        return {"raw": None, "message": {"timeout": True, "error": str(exc)}}
    except (SolutionError, WorkerFailed) as exc:
        return {"raw": None, "message": {"error": str(exc)[:1000]}}
    finally:
        worker.close()
    ms = aggregate_ms(times_ms)
    return {
        "raw": math.log(ms),
        "message": {"correct": True, "time_ms": round(ms, 4)},
        "details": {"times_ms": times_ms, "n_elements": n, "timer": timer, "cores": cores,
                    "solution_confined": worker.confined},
    }


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    import torch

    defaults = {"device": "cuda" if torch.cuda.is_available() else "cpu", "n_elements": 4_000_000,
                "check_elements": 1024, "warmup_calls": 3, "timed_calls": 7, "call_timeout_s": 20,
                "solution": os.path.join(here, "solution")}
    params_file = os.environ.get("REBENCH_SCORE_PARAMS")
    if params_file and os.path.exists(params_file):
        with open(params_file, encoding="utf-8") as handle:
            defaults.update(json.load(handle))
    print(json.dumps(score(defaults), indent=2))
