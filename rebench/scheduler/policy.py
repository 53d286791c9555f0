"""Which queued attempts start now: reservation with backfill (EASY backfilling), or FCFS.

A pure function of the queue, what is free, and what runs until when, so the campaign runner
and the makespan simulation (benchmarks/makespan.py) use the same code.

`backfill` (the default): the queue is ordered by priority (human attempts first), then by
size (GPUs x expected duration, largest first: a long many-GPU attempt started last would
leave the tail of a campaign idle), then by plan order. Going down that order, an attempt
that fits what is free starts. The first one that does not fit gets a reservation: the
earliest moment the running attempts' expected ends free enough for it. From then on a
later attempt starts only if it cannot delay that reservation: it ends before the reserved
moment, or it fits in what the reservation leaves spare. So an attempt waiting for 4 GPUs
does not hold back 1-GPU or CPU-only attempts, and it does not starve either: its start is
bounded by the expected ends of what ran before it (estimates are the attempts' budgets; an
attempt that runs over delays the reservation by that much and no more).

`fcfs`: plan order, and the first attempt that does not fit blocks all behind it (the baseline).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Policy = Literal["backfill", "fcfs"]
POLICIES: tuple[Policy, ...] = ("backfill", "fcfs")


@dataclass(frozen=True)
class Need:
    """Resources, as what one attempt needs or what a host has free."""

    gpus: int = 0
    cpus: float = 0.0
    memory_gb: float = 0.0
    slots: int = 0
    """Attempts at once (`--parallel`): each attempt takes one."""

    def fits(self, free: Need) -> bool:
        return (self.gpus <= free.gpus and self.cpus <= free.cpus + 1e-9
                and self.memory_gb <= free.memory_gb + 1e-9 and self.slots <= free.slots)

    def __add__(self, other: Need) -> Need:
        return Need(self.gpus + other.gpus, self.cpus + other.cpus, self.memory_gb + other.memory_gb,
                    self.slots + other.slots)

    def __sub__(self, other: Need) -> Need:
        return Need(self.gpus - other.gpus, self.cpus - other.cpus, self.memory_gb - other.memory_gb,
                    self.slots - other.slots)

    def capped(self, capacity: Need) -> Need:
        """An attempt that wants more than the whole host gets the whole host (it would never start)."""
        return Need(self.gpus, min(self.cpus, capacity.cpus), min(self.memory_gb, capacity.memory_gb), self.slots)


@dataclass(frozen=True)
class Job:
    id: int
    need: Need
    duration_s: float
    """Expected run time (the budget, for an attempt): reservations are planned with it."""
    priority: int = 0
    order: int = 0


@dataclass(frozen=True)
class Running:
    need: Need
    end_s: float
    """When it is expected to end (may be in the past if it runs over)."""


def queue_order(jobs: Sequence[Job], policy: Policy) -> list[Job]:
    if policy == "fcfs":
        return sorted(jobs, key=lambda j: (-j.priority, j.order))
    return sorted(jobs, key=lambda j: (-j.priority, -(max(j.need.gpus, 1) * j.duration_s), j.order))


def _reservation(job: Job, free: Need, running: Sequence[Running], now: float) -> tuple[float, Need]:
    """When `job` can start if nothing else starts, and what is spare then beyond its need. Never,
    as far as we know, when what it waits for is held by another process (its end is unknown):
    then nothing of ours can delay it, and whatever fits may start."""
    available = free
    for item in sorted(running, key=lambda r: r.end_s):
        if job.need.fits(available):
            break
        available = available + item.need
        now = max(now, item.end_s)
    if not job.need.fits(available):
        return math.inf, available
    return now, available - job.need


def pick(queue: Sequence[Job], free: Need, running: Sequence[Running], now: float,
         policy: Policy = "backfill") -> list[Job]:
    """The jobs of `queue` to start now, in the order to start them."""
    chosen: list[Job] = []
    reserved: tuple[float, Need] | None = None
    for job in queue_order(queue, policy):
        if reserved is None:
            if job.need.fits(free):
                chosen.append(job)
                free = free - job.need
                running = [*running, Running(job.need, now + job.duration_s)]
                continue
            if policy == "fcfs":
                break
            reserved = _reservation(job, free, running, now)
            continue
        shadow, spare = reserved
        if not job.need.fits(free):
            continue
        if now + job.duration_s <= shadow:
            chosen.append(job)
            free = free - job.need
        elif job.need.fits(spare):
            chosen.append(job)
            free, reserved = free - job.need, (shadow, spare - job.need)
    return chosen
