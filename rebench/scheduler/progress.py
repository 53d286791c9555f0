"""How far a campaign is, read from the store alone, so any terminal can show a campaign that
runs in another process (or on another host of the same database): `rebench campaigns list|show`
and the live view of `rebench run`.

Counts are per (environment, agent): `done` counts the counted rows that ended normally (done,
or stopped at a limit), `error` and `interrupted` those that did not; `running` and `queued` what
is under way; `retried` the tries that no longer count (an infrastructure
failure, or a harness that died). Whether the campaign still runs is its lease's heartbeat.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel
from sqlalchemy import select

from rebench.errors import RebenchError
from rebench.scheduler.concurrency import Concurrency
from rebench.scheduler.leases import Lease, holder_alive, lease_timeout_s
from rebench.store.db import Store
from rebench.store.models import FINISHED_STATUSES, Attempt, AttemptStatus, Campaign, CampaignStatus

State = Literal["running", "orphaned", "done", "interrupted"]


class GroupProgress(BaseModel):
    environment: str
    agent: str
    planned: int
    done: int = 0
    error: int = 0
    interrupted: int = 0
    running: int = 0
    queued: int = 0
    retried: int = 0
    mean_wall_s: float | None = None


class CampaignProgress(BaseModel):
    campaign_id: int
    created_at: datetime
    state: State
    """`orphaned`: the row says running but no live process holds it (`rebench run --resume ID`)."""
    holder: str | None = None
    """pid@host of the process running it."""
    groups: list[GroupProgress]
    eta_s: float | None = None
    """Remaining attempts x their mean wall time, over the attempts running at once."""
    concurrency: Concurrency | None = None
    """How many attempts run at once and what bounds it, as `rebench run` said before the first started."""
    waiting: dict[str, int] = {}
    """Queued attempts by what they wait for (CPUs, memory, GPUs, a --parallel slot), once the queue looked."""

    @property
    def state_text(self) -> str:
        return f"{self.state} ({self.holder})" if self.holder else self.state

    @property
    def planned(self) -> int:
        return sum(g.planned for g in self.groups)

    @property
    def done(self) -> int:
        return sum(g.done for g in self.groups)

    @property
    def error(self) -> int:
        return sum(g.error for g in self.groups)

    @property
    def interrupted(self) -> int:
        return sum(g.interrupted for g in self.groups)

    @property
    def ended(self) -> int:
        """Attempts that will not run again without `--resume`: done, error and interrupted."""
        return self.done + self.error + self.interrupted

    def counts_text(self) -> str:
        """`2/4 done, 1 error, 1 interrupted`: an attempt that failed is never counted as done."""
        parts = [f"{self.done}/{self.planned} done"]
        parts += [f"{n} {what}" for n, what in ((self.error, "error"), (self.interrupted, "interrupted")) if n]
        return ", ".join(parts)

    @property
    def running(self) -> int:
        return sum(g.running for g in self.groups)

    @property
    def queued(self) -> int:
        return sum(g.queued for g in self.groups)

    def queued_text(self) -> str:
        """`3 queued (2 waiting for CPUs, 1 for a --parallel slot)`."""
        if not self.waiting or not self.queued:
            return f"{self.queued} queued"
        parts = [f"{n} {'waiting ' if i == 0 else ''}for {why}"
                 for i, (why, n) in enumerate(sorted(self.waiting.items(), key=lambda kv: (-kv[1], kv[0])))]
        return f"{self.queued} queued ({', '.join(parts)})"


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    return (b.replace(tzinfo=UTC) - a.replace(tzinfo=UTC)).total_seconds()


def _groups(attempts: list[Attempt]) -> list[GroupProgress]:
    groups: dict[tuple[str, str], GroupProgress] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    for a in attempts:
        key = (a.environment, a.agent)
        group = groups.setdefault(key, GroupProgress(environment=a.environment, agent=a.agent, planned=0))
        if a.retry_of is None:
            group.planned += 1
        if not a.counted:
            group.retried += 1
        elif a.status == AttemptStatus.RUNNING:
            group.running += 1
        elif a.status == AttemptStatus.QUEUED:
            group.queued += 1
        elif a.status in FINISHED_STATUSES:
            if a.status == AttemptStatus.ERROR:
                group.error += 1
            elif a.status == AttemptStatus.INTERRUPTED:
                group.interrupted += 1
            else:
                group.done += 1
            wall = _seconds(a.started_at, a.ended_at)
            if wall is not None:
                walls.setdefault(key, []).append(wall)
    for key, values in walls.items():
        groups[key].mean_wall_s = sum(values) / len(values)
    return sorted(groups.values(), key=lambda g: (g.environment, g.agent))


def _eta(groups: list[GroupProgress], running: int) -> float | None:
    known = [g.mean_wall_s for g in groups if g.mean_wall_s is not None]
    left = sum(g.queued + g.running for g in groups)
    if not left:
        return 0.0
    if not known:
        return None
    total = sum((g.queued + g.running) * (g.mean_wall_s if g.mean_wall_s is not None else sum(known) / len(known))
                for g in groups)
    return total / max(running, 1)


def campaign_progress(store: Store, campaign_id: int) -> CampaignProgress:
    with store.session() as session:
        campaign = session.get(Campaign, campaign_id)
        if campaign is None:
            raise RebenchError(f"no campaign {campaign_id} in {store.path}; `rebench campaigns list` shows them")
        attempts = list(session.scalars(select(Attempt).where(Attempt.campaign_id == campaign_id)))
        leases = list(session.scalars(select(Lease).where(
            Lease.campaign_id == campaign_id, Lease.kind == "campaign", Lease.released_at.is_(None))))
        return _progress(campaign, attempts, leases)


def _progress(campaign: Campaign, attempts: list[Attempt], leases: list[Lease]) -> CampaignProgress:
    timeout = lease_timeout_s()
    live = [lease for lease in leases if holder_alive(lease, timeout_s=timeout)]
    groups = _groups(attempts)
    state: State
    if live:
        state = "running"
    elif campaign.status == CampaignStatus.RUNNING:
        state = "orphaned"
    else:
        state = "done" if campaign.status == CampaignStatus.DONE else "interrupted"
    running = sum(g.running for g in groups)
    waiting: dict[str, int] = {}
    for a in attempts:
        if a.counted and a.status == AttemptStatus.QUEUED and a.waiting_for and state == "running":
            waiting[a.waiting_for] = waiting.get(a.waiting_for, 0) + 1
    return CampaignProgress(
        campaign_id=campaign.id, created_at=campaign.created_at, state=state,
        holder=f"{live[0].holder_pid}@{live[0].holder_host}" if live else None, groups=groups,
        eta_s=_eta(groups, running) if state == "running" else None,
        concurrency=Concurrency.model_validate(campaign.concurrency) if campaign.concurrency else None,
        waiting=waiting)


def all_campaigns(store: Store, limit: int | None = None) -> list[CampaignProgress]:
    """Newest first."""
    with store.session() as session:
        query = select(Campaign).order_by(Campaign.id.desc())
        if limit is not None:
            query = query.limit(limit)
        campaigns = list(session.scalars(query))
        ids = [c.id for c in campaigns]
        attempts = list(session.scalars(select(Attempt).where(Attempt.campaign_id.in_(ids))))
        leases = list(session.scalars(select(Lease).where(
            Lease.campaign_id.in_(ids), Lease.kind == "campaign", Lease.released_at.is_(None))))
        return [_progress(c, [a for a in attempts if a.campaign_id == c.id],
                          [lease for lease in leases if lease.campaign_id == c.id]) for c in campaigns]
