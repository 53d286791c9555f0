"""The campaign's queue on this host: starts attempts as the policy says, under durable leases.

Each pass asks the lease table which of the campaign's GPUs are free (another `rebench run`
may hold some), lets rebench.scheduler.policy pick what starts, and takes each attempt's
leases in one transaction before it starts; a lease lost to another process in between just
waits for the next pass. Passes happen when an attempt ends, and every `poll_s` while
attempts wait on devices that other processes hold.

What an attempt needs: its profile's GPUs; its CPUs when its score is a timing (a
hardware-dependent profile: contention would change the score), else the CPUs are shared
(Docker's CPU quotas divide them fairly); its memory always (an overcommitted host kills
sandboxes); and one of the `--parallel` slots.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import select

from rebench.environments.metadata import Profile
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.scheduler.concurrency import Concurrency, host_concurrency, ray_concurrency, waiting_text
from rebench.scheduler.leases import PRIORITY_AGENT, LeaseBroker
from rebench.scheduler.policy import Job, Need, Policy, Running, pick
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Campaign

POLL_S = 1.0


def host_capacity(slots: int) -> Need:
    """This host's CPUs and memory, with `slots` attempts at once."""
    cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        memory_gb = float("inf")
    return Need(gpus=0, cpus=cpus, memory_gb=memory_gb, slots=slots)


def attempt_need(profile: Profile) -> Need:
    resources = profile.resources
    return Need(gpus=resources.gpus, cpus=resources.cpus if profile.hardware_dependent else 0.0,
                memory_gb=resources.memory_gb, slots=1)


@dataclass(frozen=True)
class QueuedAttempt:
    attempt_id: int
    environment: str
    need: Need
    duration_s: float
    priority: int = PRIORITY_AGENT
    order: int = 0


StartAttempt = Callable[[QueuedAttempt, list[int]], Awaitable[None]]
Waiting = Callable[[dict[int, str | None]], None]
"""Told after each pass what every attempt not yet started waits for, and None for those that started."""


class AttemptQueue:
    """Runs queued attempts on this host, never more than the capacity, GPUs leased in the store."""

    def __init__(self, broker: LeaseBroker, pool: Sequence[int], capacity: Need, *, campaign_id: int | None = None,
                 policy: Policy = "backfill", poll_s: float = POLL_S, on_waiting: Waiting | None = None) -> None:
        self.broker = broker
        self.on_waiting = on_waiting
        self.pool = list(pool)
        self.capacity = capacity
        self.campaign_id = campaign_id
        self.policy = policy
        self.poll_s = poll_s

    def _check(self, items: Sequence[QueuedAttempt]) -> None:
        for item in items:
            if item.need.gpus > len(self.pool):
                given = ",".join(map(str, self.pool)) or "none"
                raise RebenchError(f"attempt {item.attempt_id} ({item.environment}) needs {item.need.gpus} GPU(s) "
                                   f"but --gpus gives {given}; pass at least {item.need.gpus} device ids")

    def _free(self, running: Sequence[Running]) -> Need:
        used = sum((r.need for r in running), Need())
        gpus = len(self.broker.free_devices(self.pool)) if self.pool else 0
        return Need(gpus=gpus, cpus=self.capacity.cpus - used.cpus,
                    memory_gb=self.capacity.memory_gb - used.memory_gb, slots=self.capacity.slots - used.slots)

    async def run(self, items: Sequence[QueuedAttempt], start: StartAttempt,
                  stopped: Callable[[], bool] = lambda: False) -> None:
        """Until every item ran (or `stopped()` says to start no more); an exception of one
        attempt (an interrupt) cancels the others and is raised."""
        self._check(items)
        pending = {item.attempt_id: item for item in items}
        running: dict[asyncio.Task[None], Running] = {}
        try:
            while pending or running:
                if stopped():
                    pending.clear()
                if pending:
                    self._start_what_fits(pending, running, start)
                if not running:
                    if pending:
                        await asyncio.sleep(self.poll_s)  # every device is held by another process
                    continue
                done, _ = await asyncio.wait(running, timeout=self.poll_s if pending else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    running.pop(task)
                    task.result()
        except BaseException:
            for task in running:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*running, return_exceptions=True)
            raise

    def _start_what_fits(self, pending: dict[int, QueuedAttempt], running: dict[asyncio.Task[None], Running],
                         start: StartAttempt) -> None:
        now = time.monotonic()
        jobs = [Job(id=i.attempt_id, need=i.need.capped(self.capacity), duration_s=i.duration_s,
                    priority=i.priority, order=i.order) for i in pending.values()]
        free = self._free(list(running.values()))
        started: dict[int, str | None] = {}
        for job in pick(jobs, free, list(running.values()), now, self.policy):
            item = pending[job.id]
            gpus = self.broker.try_acquire(item.attempt_id, self.pool, item.need.gpus,
                                           campaign_id=self.campaign_id, priority=item.priority)
            if gpus is None:
                break  # another process took a device since we looked: the next pass sees it
            del pending[job.id]
            free = free - job.need
            started[job.id] = None
            running[asyncio.create_task(self._one(item, gpus, start))] = Running(job.need, now + job.duration_s)
        if self.on_waiting is not None:
            self.on_waiting({**self._waiting(jobs, pending, free), **started})

    def _waiting(self, jobs: Sequence[Job], pending: dict[int, QueuedAttempt], free: Need) -> dict[int, str | None]:
        """What each attempt still pending lacks, against what is left free after this pass."""
        reasons: dict[int, str | None] = {}
        claimed: int | None = None
        for job in jobs:
            if job.id not in pending:
                continue
            reason = waiting_text(job.need, free)
            if "GPUs" in reason:
                claimed = self.broker.claimed_gpus() if claimed is None else claimed
                if claimed:
                    reason = reason.replace("GPUs", "GPUs (a human attempt's claim goes first)", 1)
            reasons[job.id] = reason
        return reasons

    async def _one(self, item: QueuedAttempt, gpus: list[int], start: StartAttempt) -> None:
        try:
            await start(item, gpus)
        finally:
            self.broker.release_attempt(item.attempt_id)


def _queued_rows(store: Store, campaign_id: int) -> list[tuple[int, str, str, float]]:
    with store.session() as session:
        return [(a.id, a.environment, a.profile, a.budget_s) for a in session.scalars(
            select(Attempt).where(Attempt.campaign_id == campaign_id, Attempt.status == AttemptStatus.QUEUED)
            .order_by(Attempt.id))]


def campaign_concurrency(store: Store, registry: EnvironmentRegistry, campaign_id: int, *, parallel: int,
                         gpus: Sequence[int], cluster: Mapping[str, float] | None = None,
                         policy: Policy = "backfill") -> Concurrency:
    """How many of the campaign's queued attempts run at once here (`cluster`: the resources a Ray
    cluster reports; the attempts then ask Ray for their profile's CPUs, GPUs and memory), stored on
    the campaign's row for every terminal that shows it."""
    rows = _queued_rows(store, campaign_id)
    if cluster is not None:
        asks = {(e, p): registry.get(e).profile(p).resources for _, e, p, _ in rows}
        concurrency = ray_concurrency([(e, Need(gpus=asks[e, p].gpus, cpus=asks[e, p].cpus,
                                                memory_gb=asks[e, p].memory_gb, slots=1)) for _, e, p, _ in rows],
                                      parallel, cluster)
    else:
        needs = {(e, p): attempt_need(registry.get(e).profile(p)) for _, e, p, _ in rows}
        capacity = replace(host_capacity(parallel), gpus=len(gpus))
        concurrency = host_concurrency([(e, needs[e, p]) for _, e, p, _ in rows], capacity, policy=policy)
    with store.session() as session:
        session.get_one(Campaign, campaign_id).concurrency = concurrency.model_dump(mode="json")
    return concurrency


class _WaitWriter:
    """Writes each queued attempt's `waiting_for` when it changes (a pass that changes nothing writes nothing)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.written: dict[int, str | None] = {}

    def __call__(self, reasons: dict[int, str | None]) -> None:
        changed = {i: r for i, r in reasons.items() if self.written.get(i, "") != r}
        if not changed:
            return
        with self.store.session() as session:
            for attempt in session.scalars(select(Attempt).where(Attempt.id.in_(changed))):
                attempt.waiting_for = changed[attempt.id]
        self.written.update(changed)


async def run_campaign_queue(store: Store, registry: EnvironmentRegistry, campaign_id: int, *, gpus: Sequence[int],
                             parallel: int, start: Callable[[int, Environment, list[int]], Awaitable[None]],
                             stopped: Callable[[], bool] = lambda: False, policy: Policy = "backfill",
                             cluster: bool = False) -> None:
    """Run the campaign's queued attempts (in plan order), holding the campaign's lease and
    beating for every lease of this process until they end. `cluster`: a cluster executor places
    the attempts and their GPUs; here only `parallel` of them are handed to it at once."""
    rows = _queued_rows(store, campaign_id)
    needs = {(e, p): attempt_need(registry.get(e).profile(p)) for _, e, p, _ in rows}
    if cluster:
        needs = {key: Need(slots=1) for key in needs}
    items = [QueuedAttempt(attempt_id=i, environment=e, need=needs[e, p], duration_s=b, order=n)
             for n, (i, e, p, b) in enumerate(rows)]
    broker = LeaseBroker(store)
    broker.hold_campaign(campaign_id)
    capacity = Need(cpus=math.inf, memory_gb=math.inf, slots=parallel) if cluster else host_capacity(parallel)
    queue = AttemptQueue(broker, [] if cluster else gpus, capacity, campaign_id=campaign_id, policy=policy,
                         on_waiting=_WaitWriter(store))

    async def one(item: QueuedAttempt, lease: list[int]) -> None:
        await start(item.attempt_id, registry.get(item.environment), lease)

    try:
        with broker.heartbeat():
            await queue.run(items, one, stopped)
    finally:
        broker.release_campaign(campaign_id)
