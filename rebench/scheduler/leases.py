"""Durable leases: which harness process holds which GPU, attempt and campaign, as store rows.

A lease is a row, not a variable, so that two `rebench run` processes on one host (or a
process and the next one after a crash) agree on who holds a device. Taking GPUs is one
transaction guarded by a partial unique index (one unreleased row per host and device): two
processes racing for a device cannot both commit. Each holder writes a heartbeat from a
thread of its own; a row whose heartbeat is older than the timeout, or whose holder process
on this host is gone, is released by the next process that looks (dead holders are reclaimed).

Row kinds: `gpu` (one per device), `attempt` (one per running attempt, GPUs or not: the
orphan check of rebench.scheduler.resume reads its heartbeat), `campaign` (the process that
runs a campaign; a second `--resume` of it is refused while it beats) and `request` (a
waiting claim for GPUs of a higher priority, e.g. a human attempt: processes of lower
priority leave that many devices alone until the claim is granted or withdrawn).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from rebench.errors import RebenchError
from rebench.processes import pid_alive
from rebench.store.db import Store
from rebench.store.models import Base, utcnow

DEFAULT_TIMEOUT_S = 60.0
"""A holder whose heartbeat is older than this is dead; `REBENCH_LEASE_TIMEOUT_S` overrides it."""

PRIORITY_AGENT = 0
PRIORITY_HUMAN = 10


class Lease(Base):
    """One held (or, kind `request`, wanted) resource; `released_at` set once it is given back."""

    __tablename__ = "leases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # gpu | attempt | campaign | request
    host: Mapped[str] = mapped_column(String(255))
    """The machine whose device this is (device ids are per host)."""
    device: Mapped[int | None] = mapped_column(Integer)
    attempt_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id"), index=True)
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id"), index=True)
    priority: Mapped[int] = mapped_column(Integer, default=PRIORITY_AGENT)
    waiting_gpus: Mapped[int] = mapped_column(Integer, default=0)
    holder_pid: Mapped[int] = mapped_column(Integer)
    holder_host: Mapped[str] = mapped_column(String(255))
    acquired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    release_reason: Mapped[str | None] = mapped_column(Text)


def lease_timeout_s() -> float:
    text = os.environ.get("REBENCH_LEASE_TIMEOUT_S")
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise RebenchError(f"invalid REBENCH_LEASE_TIMEOUT_S={text!r}: a positive number of seconds")
    return value


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def holder_alive(lease: Lease, *, timeout_s: float, now: datetime | None = None) -> bool:
    """A fresh heartbeat, and, for a holder on this machine, a process that still runs."""
    now = now or datetime.now(UTC)
    if (now - _aware(lease.heartbeat_at)).total_seconds() > timeout_s:
        return False
    return not (lease.holder_host == socket.gethostname() and not pid_alive(lease.holder_pid))


class LeaseBroker:
    """This process's side of the lease table: take, beat, release, and reclaim dead holders' rows."""

    def __init__(self, store: Store, *, host: str | None = None, pid: int | None = None,
                 timeout_s: float | None = None) -> None:
        self.store = store
        self.host = host or socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self.timeout_s = timeout_s if timeout_s is not None else lease_timeout_s()
        self._beating: threading.Event | None = None

    @property
    def interval_s(self) -> float:
        return self.timeout_s / 6

    def _new(self, kind: str, **fields: Any) -> Lease:
        now = datetime.now(UTC)
        return Lease(kind=kind, host=self.host, holder_pid=self.pid, holder_host=self.host,
                     acquired_at=now, heartbeat_at=now, **fields)

    def _active(self, session: Session, *kinds: str) -> list[Lease]:
        return list(session.scalars(select(Lease).where(Lease.released_at.is_(None), Lease.kind.in_(kinds))))

    def reclaim(self, session: Session) -> int:
        """Release the rows of dead holders (stale heartbeat; or, here, a process that is gone)."""
        now = datetime.now(UTC)
        count = 0
        for lease in self._active(session, "gpu", "attempt", "campaign", "request"):
            if holder_alive(lease, timeout_s=self.timeout_s, now=now):
                continue
            lease.released_at = now
            lease.release_reason = f"reclaimed: holder {lease.holder_host}:{lease.holder_pid} is dead"
            count += 1
        session.flush()
        return count

    def _mine(self, lease: Lease) -> bool:
        return lease.holder_pid == self.pid and lease.holder_host == self.host

    def free_devices(self, pool: Sequence[int], priority: int = PRIORITY_AGENT) -> list[int]:
        """The devices of `pool` no live holder has, less as many as live claims of a higher
        priority (by other holders) wait for: those are theirs first."""
        with self.store.session() as session:
            self.reclaim(session)
            return self._free(session, pool, priority)

    def _free(self, session: Session, pool: Sequence[int], priority: int) -> list[int]:
        taken = {lease.device for lease in self._active(session, "gpu") if lease.host == self.host}
        free = [device for device in pool if device not in taken]
        return free[:max(0, len(free) - self._claimed(session, priority))]

    def _claimed(self, session: Session, priority: int) -> int:
        return sum(lease.waiting_gpus for lease in self._active(session, "request")
                   if lease.host == self.host and lease.priority > priority and not self._mine(lease))

    def claimed_gpus(self, priority: int = PRIORITY_AGENT) -> int:
        """GPUs that live claims of a higher priority (a human attempt's) wait for on this host."""
        with self.store.session() as session:
            return self._claimed(session, priority)

    def try_acquire(self, attempt_id: int, pool: Sequence[int], count: int, *, campaign_id: int | None = None,
                    priority: int = PRIORITY_AGENT) -> list[int] | None:
        """`count` devices of `pool` for the attempt, with its `attempt` row, in one transaction;
        None when they are not free now (another process may have just taken them)."""
        try:
            with self.store.session() as session:
                self.reclaim(session)  # a write first: the transaction holds SQLite's write lock from here
                free = self._free(session, pool, priority)
                if len(free) < count:
                    return None
                taken = free[:count]
                session.add(self._new("attempt", attempt_id=attempt_id, campaign_id=campaign_id, priority=priority))
                for device in taken:
                    session.add(self._new("gpu", device=device, attempt_id=attempt_id, campaign_id=campaign_id,
                                          priority=priority))
                session.flush()
                return taken
        except IntegrityError:
            return None  # the unique index: another holder committed one of these devices first

    def claim(self, gpus: int, *, priority: int, attempt_id: int | None = None) -> int:
        """A waiting claim for `gpus` devices at `priority`; withdraw it once they are taken."""
        with self.store.session() as session:
            lease = self._new("request", attempt_id=attempt_id, priority=priority, waiting_gpus=gpus)
            session.add(lease)
            session.flush()
            return lease.id

    def withdraw(self, claim_id: int) -> None:
        self._release(Lease.id == claim_id, "granted or withdrawn")

    def hold_campaign(self, campaign_id: int) -> None:
        """This process runs the campaign; RebenchError when a live process already does (or
        another one took it in the same moment: the unique index refuses the second row)."""
        try:
            self._hold_campaign(campaign_id)
        except IntegrityError:
            raise RebenchError(f"campaign {campaign_id} was just taken by another process; "
                               "`rebench campaigns show` says which") from None

    def _hold_campaign(self, campaign_id: int) -> None:
        with self.store.session() as session:
            self.reclaim(session)
            for lease in self._active(session, "campaign"):
                if lease.campaign_id != campaign_id:
                    continue
                if self._mine(lease):
                    return
                raise RebenchError(f"campaign {campaign_id} is running in process {lease.holder_pid} on "
                                   f"{lease.holder_host}; stop it first or wait for it to end")
            session.add(self._new("campaign", campaign_id=campaign_id))

    def release_attempt(self, attempt_id: int, reason: str = "attempt ended") -> None:
        self._release(Lease.attempt_id == attempt_id, reason)

    def release_campaign(self, campaign_id: int, reason: str = "campaign ended") -> None:
        self._release(Lease.campaign_id == campaign_id, reason)

    def _release(self, where: Any, reason: str) -> None:
        with self.store.session() as session:
            for lease in session.scalars(select(Lease).where(where, Lease.released_at.is_(None))):
                if self._mine(lease):
                    lease.released_at, lease.release_reason = datetime.now(UTC), reason

    def beat(self) -> None:
        """Renew every unreleased row of this holder."""
        now = datetime.now(UTC)
        with self.store.session() as session:
            for lease in session.scalars(select(Lease).where(
                    Lease.released_at.is_(None), Lease.holder_pid == self.pid, Lease.holder_host == self.host)):
                lease.heartbeat_at = now

    @contextmanager
    def heartbeat(self) -> Iterator[LeaseBroker]:
        """Beat from a thread while the block runs: a busy event loop does not make the holder look dead."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.interval_s):
                try:
                    self.beat()
                except Exception:  # a locked database for a moment: the next beat catches up
                    continue

        thread = threading.Thread(target=loop, name="rebench-lease-heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()


def active_leases(store: Store, *, campaign_id: int | None = None) -> list[Lease]:
    """Unreleased rows (of one campaign), oldest first."""
    with store.session() as session:
        query = select(Lease).where(Lease.released_at.is_(None)).order_by(Lease.id)
        if campaign_id is not None:
            query = query.where(Lease.campaign_id == campaign_id)
        return list(session.scalars(query))
