"""Orphans and resume: what a harness that died (even by SIGKILL) left, and how a campaign goes on.

An attempt is orphaned when it is `running` but no live process holds its lease (the
`attempt` lease row, of it or of the attempt it retries: a retry runs under its first try's
lease). Liveness is the lease's heartbeat, so a campaign running on another host is not
taken for dead; rows from before leases existed fall back to the pid check on this host.

Resuming a campaign (`rebench run --resume ID`): orphans become `interrupted` tries that are
no longer counted, each with a queued retry (so does a first try that failed on the
infrastructure when the harness died before planning its retry); attempts that never started
are queued again; finished attempts stay as they are, with every event and score they
recorded. On the docker backend the containers of dead harnesses are removed first (they would
hold on to GPUs). Each planned attempt (environment, agent, seed) thus ends with exactly one
counted row. Human attempts are never touched: their supervisor, or `rebench human
attach|stop`, looks after them.
"""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rebench.errors import RebenchError
from rebench.processes import pid_alive
from rebench.scheduler.leases import Lease, LeaseBroker, holder_alive
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Campaign, CampaignStatus, ErrorSource, HumanSession

HUMAN_AGENT = "human"
DIED = "the harness process died while the attempt was running"


def _lease_root(session: Session, attempt: Attempt) -> list[int]:
    """The attempt's id and those of the tries it retries (a retry runs under its first try's lease)."""
    ids = [attempt.id]
    current: Attempt | None = attempt
    while current is not None and current.retry_of is not None:
        ids.append(current.retry_of)
        current = session.get(Attempt, current.retry_of)
    return ids


def _orphaned(session: Session, attempt: Attempt, broker: LeaseBroker) -> bool:
    leases = list(session.scalars(select(Lease).where(Lease.kind == "attempt",
                                                      Lease.attempt_id.in_(_lease_root(session, attempt)))))
    if not leases:  # a row from before leases: the process, if it is on this host
        return not (attempt.pid is not None and pid_alive(attempt.pid) and attempt.pid != os.getpid())
    return not any(lease.released_at is None and holder_alive(lease, timeout_s=broker.timeout_s)
                   for lease in leases)


def recover_orphans(store: Store, *, campaign_id: int | None = None, broker: LeaseBroker | None = None) -> int:
    """Mark orphaned attempts `interrupted` (infrastructure); human attempts are left alone: their
    container outlives a dead supervisor with the expert's work in it."""
    broker = broker or LeaseBroker(store)
    humans = select(HumanSession.attempt_id)
    fixed = 0
    with store.session() as session:
        broker.reclaim(session)
        query = select(Attempt).where(Attempt.status == AttemptStatus.RUNNING, Attempt.id.not_in(humans))
        if campaign_id is not None:
            query = query.where(Attempt.campaign_id == campaign_id)
        for attempt in session.scalars(query):
            if not _orphaned(session, attempt, broker):
                continue
            attempt.status, attempt.error_source = AttemptStatus.INTERRUPTED, ErrorSource.INFRASTRUCTURE
            attempt.error_message = DIED
            fixed += 1
    return fixed


def retry_row(failed: Attempt) -> Attempt:
    """A queued row that tries `failed` again (the campaign's infrastructure retry, and resume's)."""
    return Attempt(
        campaign_id=failed.campaign_id, source="own", environment=failed.environment,
        env_version=failed.env_version, profile=failed.profile, agent=failed.agent, model=failed.model,
        budget_s=failed.budget_s, seed=failed.seed, status=AttemptStatus.QUEUED, backend=failed.backend,
        network=failed.network, retry_of=failed.id,
    )


def remove_orphan_containers() -> list[str]:
    """The containers of dead harness processes (`rebench gc`): a killed attempt's sandbox would
    otherwise keep running its agent's jobs on the GPUs its lease no longer holds. Human
    attempts' containers are never touched. Best effort: no engine, nothing removed."""
    try:
        from rebench.images import collect_garbage
        from rebench.sandbox.docker import DockerEngine

        return collect_garbage(DockerEngine.connect(timeout=5)).removed_containers
    except Exception:
        return []


def _retry_lost(attempt: Attempt, retried: set[int]) -> bool:
    """A first try that failed on the infrastructure, whose retry the dying harness never planned."""
    return (attempt.status == AttemptStatus.ERROR and attempt.error_source == ErrorSource.INFRASTRUCTURE
            and attempt.counted and attempt.retry_of is None and attempt.id not in retried)


def campaign_spec(store: Store, campaign_id: int) -> dict[str, Any]:
    """The stored spec of a campaign; RebenchError naming the ids there are when it does not exist."""
    with store.session() as session:
        campaign = session.get(Campaign, campaign_id)
        if campaign is None:
            ids = list(session.scalars(select(Campaign.id).order_by(Campaign.id.desc()).limit(5)))
            known = ", ".join(map(str, ids)) if ids else "none yet"
            raise RebenchError(f"no campaign {campaign_id} in {store.path}; recent campaigns: {known} "
                               "(`rebench campaigns list`)")
        return dict(campaign.spec)


def check_resumable(store: Store, campaign_id: int) -> None:
    """RebenchError, before anything is written, when every counted attempt of the campaign ended
    (done, limit or error) and none is a first try lost to the infrastructure without its retry (as
    when the Ray cluster was lost): a resume would only rewrite the campaign's status."""
    campaign_spec(store, campaign_id)
    with store.session() as session:
        attempts = list(session.scalars(select(Attempt).where(
            Attempt.campaign_id == campaign_id, Attempt.agent != HUMAN_AGENT)))
        retried = {a.retry_of for a in attempts if a.retry_of is not None}
        counted = [a for a in attempts if a.counted]
        open_ = (AttemptStatus.QUEUED, AttemptStatus.RUNNING, AttemptStatus.INTERRUPTED)
        resumable = any(a.status in open_ or _retry_lost(a, retried) for a in counted)
    if not resumable:
        raise RebenchError(f"campaign {campaign_id} has nothing to resume: its {len(counted)} attempt(s) all "
                           f"ended (`rebench campaigns show {campaign_id}`)")


def prepare_resume(store: Store, campaign_id: int, broker: LeaseBroker | None = None) -> list[int]:
    """Make the campaign ready to go on; returns the ids of its attempts to run now, queued.
    RebenchError when another live process runs it."""
    broker = broker or LeaseBroker(store)
    spec = campaign_spec(store, campaign_id)
    broker.hold_campaign(campaign_id)  # refuses while another process runs it; released by the runner
    try:
        recover_orphans(store, campaign_id=campaign_id, broker=broker)
        if spec.get("backend") == "docker":
            remove_orphan_containers()
        with store.session() as session:
            attempts = list(session.scalars(select(Attempt).where(
                Attempt.campaign_id == campaign_id, Attempt.agent != HUMAN_AGENT).order_by(Attempt.id)))
            retried = {a.retry_of for a in attempts if a.retry_of is not None}
            for attempt in attempts:
                if _retry_lost(attempt, retried):
                    attempt.counted = False
                    session.add(retry_row(attempt))
                    continue
                if attempt.status != AttemptStatus.INTERRUPTED or not attempt.counted:
                    continue
                if attempt.started_at is None:  # never ran: run it now, the same row
                    attempt.status, attempt.error_source, attempt.error_message = AttemptStatus.QUEUED, None, None
                    continue
                attempt.counted = False  # what it recorded stays; its retry is the counted one
                session.add(retry_row(attempt))
            session.get_one(Campaign, campaign_id).status = CampaignStatus.RUNNING
            session.flush()
            return list(session.scalars(select(Attempt.id).where(
                Attempt.campaign_id == campaign_id, Attempt.status == AttemptStatus.QUEUED).order_by(Attempt.id)))
    except BaseException:
        broker.release_campaign(campaign_id, "resume failed")
        raise
