"""Run a queue policy on attempts given as durations, without sandboxes: makespan and its lower bound.

The scheduler plans with each attempt's expected duration (its budget); the simulation ends
it after its true one (an agent that submits early, or pauses for scoring that stretch the
wall clock past the budget), which is what the real queue sees too.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from rebench.scheduler.policy import Job, Need, Policy, Running, pick


@dataclass(frozen=True)
class SimJob:
    job: Job
    actual_s: float


@dataclass(frozen=True)
class SimResult:
    makespan_s: float
    lower_bound_s: float
    starts: dict[int, float]

    @property
    def ratio(self) -> float:
        return self.makespan_s / self.lower_bound_s


def lower_bound(jobs: Sequence[SimJob], gpus: int) -> float:
    """max(total GPU-time / GPUs, the longest attempt): no schedule on `gpus` devices beats it."""
    gpu_time = sum(j.job.need.gpus * j.actual_s for j in jobs)
    return max(gpu_time / gpus, max(j.actual_s for j in jobs))


def simulate(jobs: Sequence[SimJob], capacity: Need, policy: Policy) -> SimResult:
    queue = {j.job.id: j for j in jobs}
    free = capacity
    now = 0.0
    ends: list[tuple[float, int]] = []  # (true end, job id)
    running: dict[int, Running] = {}
    starts: dict[int, float] = {}
    while queue or ends:
        for job in pick([j.job for j in queue.values()], free, list(running.values()), now, policy):
            started = queue.pop(job.id)
            free = free - job.need
            running[job.id] = Running(job.need, now + job.duration_s)
            starts[job.id] = now
            heapq.heappush(ends, (now + started.actual_s, job.id))
        if not ends:
            raise ValueError(f"{len(queue)} job(s) can never start on {capacity}")
        now, done = heapq.heappop(ends)
        free = free + running.pop(done).need
        while ends and ends[0][0] <= now:  # everything ending at the same moment, then decide once
            free = free + running.pop(heapq.heappop(ends)[1]).need
    return SimResult(makespan_s=now, lower_bound_s=lower_bound(jobs, capacity.gpus), starts=starts)
