"""Scoring for "Optimize a Kernel": time `prefix_sum` from the solution folder.

Called by the rebench scoring helper as `score(ctx)`; run directly
(`python score.py`) it prints the same result without logging it.

Raw score = ln(milliseconds per call), lower is better. A wrong answer, an
exception or a call over the per-call timeout makes the score invalid (None).

The `paper` profile times wall-clock milliseconds bracketed by CUDA synchronize.
The `tiny` profile (`timer = "cpu"`) times the CPU milliseconds the call costs,
so a busy shared machine, which stretches wall time but not work, does not move
the score. Work hidden in another process would not show in CPU time, so wall
time divided by the cores the scorer may use is a floor under it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import resource
import signal
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Any

import torch


class CallTimeout(Exception):
    pass


def reference_prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """The definition, in plain PyTorch: include x[j] when an odd number of positives precede it."""
    is_positive = (x > 0).to(torch.int64)
    positives_before = torch.cumsum(is_positive, dim=0) - is_positive
    included = x.to(torch.int64) * (positives_before % 2)
    return torch.cumsum(included, dim=0).to(torch.int32)


def random_input(n: int, device: str, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(-10, 10, (n,), dtype=torch.int32, generator=generator).to(device)


def check_output(expected: torch.Tensor, actual: Any) -> str | None:
    """Why `actual` is not exactly `expected`, or None when it is."""
    if not isinstance(actual, torch.Tensor):
        return f"prefix_sum returned {type(actual).__name__}, expected a torch.Tensor"
    for field in ("shape", "dtype", "device"):
        if getattr(actual, field) != getattr(expected, field):
            return f"wrong {field}: got {getattr(actual, field)}, expected {getattr(expected, field)}"
    if not torch.equal(actual, expected):
        wrong = int((actual != expected).sum())
        return f"wrong values at {wrong} of {expected.numel()} positions"
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


# Bound before the solution is imported, so a solution that replaces `time.perf_counter`
# and friends does not change the scorer's clocks.
_perf_counter = time.perf_counter
_process_time = time.process_time
_getrusage = resource.getrusage
_RUSAGE_CHILDREN = resource.RUSAGE_CHILDREN


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of the children it has waited for."""
    children = _getrusage(_RUSAGE_CHILDREN)
    return _process_time() + children.ru_utime + children.ru_stime


def call_ms(timer: str, wall_s: float, cpu_s: float, cores: int) -> float:
    """Milliseconds charged for one call: wall time, or CPU time floored by wall time per usable core."""
    if timer == "wall":
        return wall_s * 1000
    if timer == "cpu":
        return max(cpu_s, wall_s / cores) * 1000
    raise ValueError(f"unknown timer {timer!r}; allowed: 'wall', 'cpu'")


@contextmanager
def call_timeout(seconds: float):
    def _expire(_signum: int, _frame: Any) -> None:
        raise CallTimeout(f"a call took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load_solution(solution_dir: str):
    path = os.path.join(solution_dir, "solution.py")
    spec = importlib.util.spec_from_file_location("solution", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, solution_dir)
    spec.loader.exec_module(module)
    return module.prefix_sum


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    device = str(ctx["device"])
    n = int(ctx["n_elements"])
    limit = float(ctx["call_timeout_s"])
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    threads = ctx.get("torch_threads")
    timer = str(ctx.get("timer", "wall"))
    if timer not in ("wall", "cpu"):
        raise ValueError(f"unknown timer {timer!r}; allowed: 'wall', 'cpu'")
    cores = usable_cores()
    try:
        prefix_sum = load_solution(str(ctx["solution"]))
        small = random_input(int(ctx["check_elements"]), device, generator)
        with call_timeout(limit):
            problem = check_output(reference_prefix_sum(small), prefix_sum(small))
        if problem:
            return {"raw": None, "message": {"correct": False, "error": f"length {small.numel()}: {problem}"}}
        for _ in range(int(ctx["warmup_calls"])):
            if threads:
                torch.set_num_threads(int(threads))
            with call_timeout(limit):
                prefix_sum(random_input(n, device, generator))
            _synchronize(device)
        times_ms = []
        for _ in range(int(ctx["timed_calls"])):
            x = random_input(n, device, generator)
            expected = reference_prefix_sum(x)
            _synchronize(device)
            if threads:
                torch.set_num_threads(int(threads))
            with call_timeout(limit):
                started, started_cpu = _perf_counter(), cpu_seconds()
                actual = prefix_sum(x)
                _synchronize(device)
                wall_s, cpu_s = _perf_counter() - started, cpu_seconds() - started_cpu
            times_ms.append(call_ms(timer, wall_s, cpu_s, cores))
            problem = check_output(expected, actual)
            if problem:
                return {"raw": None, "message": {"correct": False, "error": f"length {n}: {problem}"}}
    except CallTimeout as exc:
        return {"raw": None, "message": {"timeout": True, "error": str(exc)}}
    except Exception as exc:
        return {"raw": None, "message": {"error": f"{type(exc).__name__}: {exc}"[:1000]}}
    ms = aggregate_ms(times_ms)
    return {
        "raw": math.log(ms),
        "message": {"correct": True, "time_ms": round(ms, 4)},
        "details": {"times_ms": times_ms, "n_elements": n, "timer": timer, "cores": cores},
    }


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    defaults = {"device": "cuda" if torch.cuda.is_available() else "cpu", "n_elements": 4_000_000,
                "check_elements": 1024, "warmup_calls": 3, "timed_calls": 7, "call_timeout_s": 20,
                "solution": os.path.join(here, "solution")}
    params_file = os.environ.get("REBENCH_SCORE_PARAMS")
    if params_file and os.path.exists(params_file):
        with open(params_file, encoding="utf-8") as handle:
            defaults.update(json.load(handle))
    print(json.dumps(score(defaults), indent=2))
