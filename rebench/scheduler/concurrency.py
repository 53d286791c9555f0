"""How many of a campaign's attempts run at once, and what bounds it, said before the first starts.

`--parallel N` is an upper bound: the queue (rebench.scheduler.queue) starts an attempt only when
its GPUs, memory and (for timing scores) CPUs are free, so on a small host 8 requested can mean 1
at a time. A user who is not told that waits for hours without knowing why, so `rebench run` prints
this module's line, `--json` and `campaigns show` carry it, and each queued attempt's row says what
it waits for. Under the Ray executor the cluster places attempts, and the line is worked out from
the resources Ray reports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel

from rebench.scheduler.policy import Job, Need, Policy, pick

Resource = Literal["gpus", "cpus", "memory", "slots"]
WAIT_TEXT: dict[Resource, str] = {"gpus": "GPUs", "cpus": "CPUs", "memory": "memory", "slots": "a --parallel slot"}
"""What a queued attempt's `waiting_for` says, per resource it lacks."""


class Concurrency(BaseModel):
    """A campaign's attempts at once: `at_once` of the `requested` (--parallel), bounded by `bounds`."""

    requested: int
    attempts: int
    at_once: int
    bounds: list[Resource]
    """What stops one more from starting: resources (never `slots`); empty when --parallel or the
    number of attempts is the bound."""
    executor: Literal["host", "ray"] = "host"
    text: str


def _amount(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def need_text(need: Need) -> str:
    """`2 CPUs and 2 GB of memory`, naming only what the scheduler counts."""
    parts = []
    if need.gpus:
        parts.append(f"{need.gpus} GPU{'s' if need.gpus != 1 else ''}")
    if need.cpus:
        parts.append(f"{_amount(need.cpus)} CPU{'s' if need.cpus != 1 else ''}")
    if need.memory_gb:
        parts.append(f"{_amount(need.memory_gb)} GB of memory")
    return _listed(parts) if parts else "no reserved resources"


def _listed(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def lacking(need: Need, free: Need) -> list[Resource]:
    """The resources of `need` that `free` cannot give, in the order a user reads them."""
    found: list[Resource] = []
    if need.gpus > free.gpus:
        found.append("gpus")
    if need.cpus > free.cpus + 1e-9:
        found.append("cpus")
    if need.memory_gb > free.memory_gb + 1e-9:
        found.append("memory")
    if need.slots > free.slots:
        found.append("slots")
    return found


def waiting_text(need: Need, free: Need) -> str:
    """What a queued attempt waits for: `CPUs`, `GPUs and memory`, `a --parallel slot`, or `its turn`
    (everything fits, but the backfill reservation of a larger attempt goes first)."""
    missing = lacking(need, free)
    resources = [WAIT_TEXT[r] for r in missing if r != "slots"]
    if resources:
        return _listed(resources)
    return WAIT_TEXT["slots"] if missing else "its turn"


def host_concurrency(needs: Sequence[tuple[str, Need]], capacity: Need, *, policy: Policy = "backfill",
                     where: str = "this host") -> Concurrency:
    """Attempts at once on this host from the start (`needs`: each queued attempt's environment and
    need, in plan order; `capacity`: what the host has, `slots` = --parallel, `gpus` = --gpus)."""
    jobs = [Job(id=i, need=need.capped(capacity), duration_s=1.0, order=i) for i, (_, need) in enumerate(needs)]
    started = pick(jobs, capacity, [], 0.0, policy)
    free = capacity
    for job in started:
        free = free - job.need
    bounds: list[Resource] = []
    blocked = next((job for job in jobs if job not in started), None)
    if blocked is not None:
        bounds = [r for r in lacking(blocked.need, free) if r != "slots"]
    text = _text(capacity.slots, len(jobs), len(started), bounds, blocked, needs, capacity, where)
    return Concurrency(requested=capacity.slots, attempts=len(jobs), at_once=len(started), bounds=bounds,
                       text=text)


def _text(requested: int, attempts: int, at_once: int, bounds: list[Resource], blocked: Job | None,
          needs: Sequence[tuple[str, Need]], capacity: Need, where: str) -> str:
    head = f"{requested} requested, {at_once} at a time"
    if not bounds or blocked is None:
        if attempts < requested and at_once == attempts:
            return f"{head}: the campaign has {attempts} attempt{'s' if attempts != 1 else ''}"
        return head
    same = len({need for _, need in needs}) == 1
    who = "each attempt needs" if same else f"an attempt of {needs[blocked.id][0]} needs"
    has = []
    if "gpus" in bounds:
        has.append(f"{capacity.gpus} GPU{'s' if capacity.gpus != 1 else ''} (--gpus)")
    if "cpus" in bounds:
        has.append(f"{_amount(capacity.cpus)} CPU{'s' if capacity.cpus != 1 else ''}")
    if "memory" in bounds:
        has.append(f"{_amount(capacity.memory_gb)} GB of memory")
    given = _listed(has)
    return f"{head}: {who} {need_text(blocked.need)}, {where} has {given}"


def ray_concurrency(needs: Sequence[tuple[str, Need]], requested: int, cluster: Mapping[str, float]) -> Concurrency:
    """Attempts at once on a Ray cluster, by the totals Ray reports (`CPU`, `GPU`, `memory` in bytes):
    how many of the largest attempt fit the totals. A bound from above: Ray places each attempt on one
    node, so attempts that fit the sum of the nodes but not one node wait for Ray."""
    total = Need(gpus=int(cluster.get("GPU", 0)), cpus=float(cluster.get("CPU", 0)),
                 memory_gb=float(cluster.get("memory", 0)) / 1e9)
    largest = max((need for _, need in needs), key=lambda n: (n.gpus, n.cpus, n.memory_gb), default=Need())
    fits: dict[Resource, int] = {}
    checks: list[tuple[Resource, float, float]] = [
        ("gpus", largest.gpus, total.gpus), ("cpus", largest.cpus, total.cpus),
        ("memory", largest.memory_gb, total.memory_gb)]
    for resource, want, have in checks:
        if want > 0:
            fits[resource] = math.floor(have / want + 1e-9)
    attempts = len(needs)
    at_once = min([requested, attempts, *fits.values()])
    bounds: list[Resource] = [r for r, n in fits.items() if n == at_once and n < min(requested, attempts)]
    cluster_text = need_text(total).replace(" of memory", " of memory for tasks")
    head = f"{requested} requested, at most {at_once} at a time on the Ray cluster ({cluster_text}, as Ray reports)"
    text = f"{head}: each attempt asks Ray for {need_text(largest)}" if bounds else head
    return Concurrency(requested=requested, attempts=attempts, at_once=at_once, bounds=bounds, executor="ray",
                       text=text)
