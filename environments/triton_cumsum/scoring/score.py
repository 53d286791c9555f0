"""Scoring for "Optimize a Kernel": time `prefix_sum` from the solution folder.

Called by the rebench scoring helper as `score(ctx)`; run directly
(`python score.py`) it prints the same result without logging it.

Raw score = ln(milliseconds per call), lower is better. A wrong answer, an
exception or a call over the per-call timeout makes the score invalid (None).

The solution runs in a child process (kernel_worker.py), started through the
helper's confinement: this process generates the inputs, computes the expected
outputs and keeps the clock. The solution's code shares an interpreter with the
child's message loop and can rewrite it, so nothing in the child is trusted; what
the score rests on happens here (see README.md, "How the timing is kept honest").

The `paper` profile copies each input to the device before its clock starts, as
RE-Bench did, and times wall-clock milliseconds from the call to its return after
CUDA synchronize. On the CPU (`tiny`) the input is written to the shared buffer
only after the clock has started, and the call is charged until its answer has
been copied out; with `timer = "cpu"` it is charged the CPU time of the child and
of every process descended from it (this process is a child subreaper, so helpers
that double-fork or start their own session stay in that tree), but never less
than the wall time divided by the cores the scorer may use, where the wall time
leaves out what the calling thread spent waiting for a CPU held by other processes
(proctree.charged_ms: on a busy machine that floor would otherwise follow the load).
Every process of the
solution is killed when scoring ends.

Before the solution is imported, a do-nothing prefix_sum in the child is timed along the
same path, and its median is reported as `harness_overhead_ms`: the share of each call that
is the harness's own (process-to-process messages, buffers), which RE-Bench's in-process
timing did not have. It is reported beside the score, not subtracted from it.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from rebench.kit.confined import ChildFailed, ChildTimeout, ConfinedChild
from rebench.kit.proctree import ProcessTree, charged_ms, runqueue_wait_s, usable_cores


def reference_prefix_sum(x: np.ndarray) -> np.ndarray:
    """The definition, in plain NumPy: include x[j] when an odd number of positives precede it.

    Every step stays in int32 and wraps on overflow: sums taken modulo 2^32 end in the same
    int32 values as sums taken in int64 and then narrowed (what RE-Bench's PyTorch reference
    returns), at a fifth of the cost, which is most of a scoring call's own time."""
    is_positive = (x > 0).view(np.int8)
    parity = np.cumsum(is_positive, dtype=np.int32)  # positives up to and including j
    np.subtract(parity, is_positive, out=parity)  # ... before j
    np.bitwise_and(parity, 1, out=parity)
    np.multiply(parity, x, out=parity)
    return np.cumsum(parity, dtype=np.int32)


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


# The process-tree accounting is the environment kit's (shared with optimize_llm_foundry).
call_ms = charged_ms
_perf_counter = time.perf_counter


class SolutionError(Exception):
    """prefix_sum raised."""


class KernelWorker:
    """The solution, in a child process (see kernel_worker.py): this process keeps the inputs,
    the expected outputs and the clock, none of which the solution's code can reach, and
    accounts for the CPU time of every process the child starts (ProcessTree)."""

    def __init__(self, ctx: dict[str, Any], device: str, capacity: int, limit_s: float,
                 preload: bool | None = None, *, overhead_calls: int = 0, timer: str = "wall") -> None:
        source = (Path(__file__).resolve().parent / "kernel_worker.py").read_text(encoding="utf-8")
        # On CUDA the input is put on the device before the clock starts, as in RE-Bench.
        self.preload = device.startswith("cuda") if preload is None else preload
        self._input_fd, self._output_fd = os.memfd_create("rebench-input"), os.memfd_create("rebench-output")
        for fd in (self._input_fd, self._output_fd):
            os.ftruncate(fd, capacity * 4)
        self._input = mmap.mmap(self._input_fd, capacity * 4)
        self._output = mmap.mmap(self._output_fd, capacity * 4)
        threads = int(ctx.get("torch_threads") or 0)  # 0: leave PyTorch's default
        self.tree = ProcessTree()
        self.leftovers_killed = 0
        try:
            self.child = ConfinedChild(ctx, source, [str(ctx["solution"]), device, str(threads), str(self._input_fd),
                                                     str(self._output_fd), str(capacity)],
                                       cwd=str(ctx["solution"]), pass_fds=(self._input_fd, self._output_fd))
        except OSError:
            self.tree.close()
            self._release()
            raise
        self.overhead_ms: list[float] = []
        self._caller: int | None = None
        self.last_queued_s = 0.0
        """How long the call's thread waited for a CPU during the last call (charged_ms leaves it out)."""
        try:
            started = self.child.receive(60.0)
            self.sigchld_guard = str(started.get("sigchld_guard", "unknown"))
            # sent before the solution is imported; still only used if it is a process of the tree
            reported = started.get("pid")
            self._caller = reported if isinstance(reported, int) and reported in self.tree.pids() else None
            if overhead_calls > 0:
                self._measure_overhead(capacity, overhead_calls, limit_s, timer)
            self.child.send({"import": True})
            reply = self.child.receive(max(limit_s, 60.0))
        except (ChildFailed, ChildTimeout, SolutionError):
            self.close()
            raise
        if "error" in reply:
            self.close()
            raise ChildFailed(str(reply["error"]))

    def _measure_overhead(self, n: int, calls: int, limit_s: float, timer: str) -> None:
        """Time the child's do-nothing prefix_sum (it runs before the solution is imported, so
        only harness code is on this path) exactly as a timed call is timed, after one untimed
        call: what the harness itself adds to each call's time."""
        x = np.zeros(n, dtype=np.int32)
        cores = usable_cores()
        for index in range(calls + 1):
            _, _, wall_s, cpu_s = self.call(x, limit_s, timer)
            if index:
                self.overhead_ms.append(call_ms(timer, wall_s, cpu_s, cores, self.last_queued_s))

    def _expect(self, key: str, timeout_s: float) -> dict[str, Any]:
        reply = self.child.receive(timeout_s)
        if "error" in reply:
            raise SolutionError(str(reply["error"]))
        if key not in reply:
            raise ChildFailed(f"unexpected reply {str(reply)[:200]}")
        return reply

    def _answer(self, n: int, timeout_s: float) -> tuple[np.ndarray | None, str | None]:
        """The answer the child reports as copied out, or why there is none."""
        reply = self.child.receive(timeout_s)
        if "error" in reply:
            raise SolutionError(str(reply["error"]))
        if "problem" in reply:
            return None, str(reply["problem"])
        if "ok" not in reply:
            raise ChildFailed(f"unexpected reply {str(reply)[:200]}")
        return np.frombuffer(self._output, dtype=np.int32, count=n).copy(), None

    def call(self, x: np.ndarray, limit_s: float, timer: str) -> tuple[np.ndarray | None, str | None, float, float]:
        """One call of prefix_sum on `x`: (answer or None, why not, wall seconds, CPU seconds).

        On the CPU the clock starts before the input exists anywhere the solution can see, and
        stops once its answer has been copied here; the CPU time is the whole process tree's
        over a span that covers that window. With `preload` (CUDA) the input is copied to the
        device first and the clock brackets the call alone (or, with the CPU timer, the call and
        the copy out)."""
        n = x.size
        if self.preload:
            cpu_before = self.tree.cpu_seconds()
            np.frombuffer(self._input, dtype=np.int32, count=n)[:] = x
            self.child.send({"load": n})
            self._expect("loaded", 60.0)
            started = _perf_counter()
            self.child.send({"go": True})
            self._expect("done", limit_s)
            returned = _perf_counter()
            self.child.send({"fetch": True})
            actual, problem = self._answer(n, limit_s)
            answered = _perf_counter()
            wall_s = returned - started if timer == "wall" else answered - started
            return actual, problem, wall_s, self.tree.cpu_spent(cpu_before, self.tree.cpu_seconds())
        cpu_before = self.tree.cpu_seconds()
        queued_before = self._queued()
        started = _perf_counter()
        np.frombuffer(self._input, dtype=np.int32, count=n)[:] = x
        self.child.send({"run": n})
        actual, problem = self._answer(n, limit_s)
        answered = _perf_counter()
        queued_after = self._queued()
        self.last_queued_s = (queued_after - queued_before
                              if queued_before is not None and queued_after is not None else 0.0)
        return actual, problem, answered - started, self.tree.cpu_spent(cpu_before, self.tree.cpu_seconds())

    def _queued(self) -> float | None:
        return runqueue_wait_s(self._caller, self._caller) if self._caller is not None else None

    def close(self) -> None:
        """End the child (killing it if it does not stop: a timed-out call may still run), then
        every other process of the solution's that is still alive."""
        self.child.close()
        self.leftovers_killed = self.tree.kill()
        self.tree.close()
        self._release()

    def _release(self) -> None:
        for fd in (self._input_fd, self._output_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
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
        worker = KernelWorker(ctx, device, max(n, check_n), limit, overhead_calls=int(ctx.get("overhead_calls", 3)),
                              timer=timer)
    except ChildTimeout:
        return {"raw": None, "message": {"timeout": True, "error": "importing solution.py timed out"}}
    except ChildFailed as exc:
        return {"raw": None, "message": {"error": str(exc)[:1000]}}
    try:
        small = random_input(check_n, generator)
        actual, problem, _, _ = worker.call(small, limit, timer)
        if actual is not None:
            problem = check_output(reference_prefix_sum(small), actual)
        if problem:
            return {"raw": None, "message": {"correct": False, "error": f"length {check_n}: {problem}"}}
        for _ in range(int(ctx["warmup_calls"])):
            worker.call(random_input(n, generator), limit, timer)
        times_ms: list[float] = []
        queued_ms: list[float] = []  # each timed call's wait for a CPU, which the CPU timer's floor leaves out
        for _ in range(int(ctx["timed_calls"])):
            x = random_input(n, generator)
            expected = reference_prefix_sum(x)
            actual, problem, wall_s, cpu_s = worker.call(x, limit, timer)
            times_ms.append(call_ms(timer, wall_s, cpu_s, cores, worker.last_queued_s))
            queued_ms.append(round(worker.last_queued_s * 1000, 3))
            if actual is not None:
                problem = check_output(expected, actual)
            if problem:
                return {"raw": None, "message": {"correct": False, "error": f"length {n}: {problem}"}}
    except ChildTimeout as exc:
        return {"raw": None, "message": {"timeout": True, "error": str(exc)}}
    except (SolutionError, ChildFailed) as exc:
        return {"raw": None, "message": {"error": str(exc)[:1000]}}
    finally:
        worker.close()
    ms = aggregate_ms(times_ms)
    overhead_ms = statistics.median(worker.overhead_ms) if worker.overhead_ms else None
    message: dict[str, Any] = {"correct": True, "time_ms": round(ms, 4)}
    if overhead_ms is not None:
        message["harness_overhead_ms"] = round(overhead_ms, 4)
    return {
        "raw": math.log(ms),
        "message": message,
        "details": {"times_ms": times_ms, "queued_ms": queued_ms,
                    "harness_overhead_ms": overhead_ms, "overhead_times_ms": worker.overhead_ms,
                    "n_elements": n, "timer": timer, "cores": cores,
                    "solution_confined": worker.child.confined, "sigchld_guard": worker.sigchld_guard,
                    "processes": worker.tree.largest, "leftover_processes_killed": worker.leftovers_killed,
                    "solution_output": worker.child.output_tail()},
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
