"""The queue policy (reservation with backfill) and the makespan simulation; pure functions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchmarks.makespan import HOST, paper_campaign
from rebench.scheduler.leases import LeaseBroker
from rebench.scheduler.policy import Job, Need, Running, pick
from rebench.scheduler.queue import AttemptQueue, QueuedAttempt
from rebench.scheduler.simulate import SimJob, simulate
from rebench.store.db import Store
from rebench.store.models import Attempt

GPU = Need(gpus=1, slots=1)
HOST8 = Need(gpus=8, cpus=64, memory_gb=512, slots=100)


def _job(i: int, gpus: int, hours: float, priority: int = 0, cpus: float = 0) -> Job:
    return Job(id=i, need=Need(gpus=gpus, cpus=cpus, slots=1), duration_s=hours * 3600, priority=priority, order=i)


def test_a_waiting_big_attempt_does_not_hold_back_small_ones_that_end_before_its_turn() -> None:
    # 6 of 8 GPUs busy for 2 more hours; a 4-GPU attempt waits; 1-GPU ones of 1 h fit beside it
    running = [Running(Need(gpus=6, slots=1), end_s=2 * 3600)]
    free = Need(gpus=2, cpus=64, memory_gb=512, slots=99)
    queue = [_job(1, 4, 8), _job(2, 1, 1), _job(3, 1, 1), _job(4, 0, 1)]
    assert [j.id for j in pick(queue, free, running, 0.0, "backfill")] == [2, 3, 4]
    assert pick(queue, free, running, 0.0, "fcfs") == []  # first come, first served: all wait behind it


def test_the_reservation_keeps_a_big_attempt_from_starving() -> None:
    """A stream of long 1-GPU attempts would keep 4 GPUs from ever being free at once: those that
    would delay the reserved start are held back, those that fit beside it are not."""
    running = [Running(Need(gpus=6, slots=1), end_s=3600)]
    free = Need(gpus=2, cpus=64, memory_gb=512, slots=99)
    queue = [_job(1, 4, 8), _job(2, 1, 0.5), _job(3, 1, 0.5)]
    long_small = [_job(1, 4, 8), _job(2, 1, 2), _job(3, 1, 2)]
    # at 1 h, 8 GPUs are free; the 4-GPU attempt needs 4 of them, so 4 are spare: both may start
    assert [j.id for j in pick(long_small, free, running, 0.0)] == [2, 3]
    seven = [Running(Need(gpus=6, slots=1), end_s=3600)]
    crowded = [_job(1, 8, 8), _job(2, 1, 2), _job(3, 1, 0.5)]
    # an 8-GPU attempt reserved at 1 h: a 2 h attempt would push it back, a 30 min one would not
    assert [j.id for j in pick(crowded, free, seven, 0.0)] == [3]
    assert [j.id for j in pick(queue, free, running, 0.0)] == [2, 3]


def test_human_attempts_come_first_and_cpu_and_memory_count_too() -> None:
    free = Need(gpus=1, cpus=16, memory_gb=100, slots=10)
    queue = [_job(1, 1, 8), _job(2, 1, 0.5, priority=10)]
    assert [j.id for j in pick(queue, free, [], 0.0)] == [2]
    cpu_bound = [Job(id=i, need=Need(cpus=10, memory_gb=10, slots=1), duration_s=60, order=i) for i in range(3)]
    assert len(pick(cpu_bound, free, [], 0.0)) == 1
    memory_bound = [Job(id=i, need=Need(cpus=1, memory_gb=60, slots=1), duration_s=60, order=i) for i in range(3)]
    assert len(pick(memory_bound, free, [], 0.0)) == 1


def test_paper_campaign_on_8_gpus_is_within_5_percent_of_the_lower_bound() -> None:
    for seed in range(3):
        jobs = paper_campaign(seed)
        ours, fcfs = simulate(jobs, HOST, "backfill"), simulate(jobs, HOST, "fcfs")
        assert ours.ratio <= 1.05, (seed, ours.ratio)
        assert ours.makespan_s < fcfs.makespan_s
        assert ours.lower_bound_s == fcfs.lower_bound_s >= max(j.actual_s for j in jobs)


def test_simulation_never_overcommits() -> None:
    jobs = [SimJob(_job(i, g, h), h * 3600 * 1.05) for i, (g, h) in enumerate([(4, 8), (1, 1), (6, 2), (2, 3)] * 5)]
    result = simulate(jobs, HOST8, "backfill")
    for moment in result.starts.values():
        held = sum(j.job.need.gpus for j in jobs
                   if result.starts[j.job.id] <= moment < result.starts[j.job.id] + j.actual_s)
        assert held <= 8


def test_the_queue_starts_small_attempts_while_a_big_one_waits(tmp_path: Path) -> None:
    """The real queue (leases in a store): with 1 of 2 GPUs held by another process, a 2-GPU
    attempt waits while 1-GPU and CPU-only ones run; it starts once the device comes back."""
    store = Store(tmp_path / "r.db")
    with store.session() as session:
        made = [Attempt(environment="counter", agent="reference", budget_s=60.0) for _ in range(4)]
        session.add_all(made)
        session.flush()
        ids = [a.id for a in made]
    other = LeaseBroker(store, pid=__import__("os").getppid())
    other.try_acquire(ids[0], [0, 1], 1)
    started: list[int] = []

    async def start(item: QueuedAttempt, gpus: list[int]) -> None:
        started.append(item.attempt_id)
        await asyncio.sleep(0.05)
        if len(started) == 2:
            other.release_attempt(ids[0])

    items = [QueuedAttempt(ids[1], "counter", Need(gpus=2, slots=1), 3600, order=0),
             QueuedAttempt(ids[2], "counter", Need(gpus=1, slots=1), 60, order=1),
             QueuedAttempt(ids[3], "counter", Need(gpus=0, slots=1), 60, order=2)]
    queue = AttemptQueue(LeaseBroker(store), [0, 1], Need(cpus=2, memory_gb=8, slots=4), poll_s=0.05)
    asyncio.run(queue.run(items, start))
    assert started == [ids[2], ids[3], ids[1]]
