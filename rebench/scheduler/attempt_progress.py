"""Where each running attempt of a campaign stands, read from the store alone: working time used
and left, the latest score, tokens and cost so far. `rebench run` prints it as a line per
attempt every `--progress-every` in a pipe or a log (rebench.scheduler.progress_lines), the live
view and `campaigns show --watch` as rows.

The store holds no running clock, only timestamps: each event and score row has the working
time it was recorded at and its wall time, and the pause rows their offsets from the clock's
start. So the clock's origin is found from the newest event (the wall offset at which the
clock showed that working time), and now's working time is now's offset minus the pauses,
an open pause running to now.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select

from rebench.budget import format_duration
from rebench.scheduler.progress import CampaignProgress
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Event, Pause, ScoreEvent
from rebench.store.worktime import covered, merge

RECENT_EVENTS = 20
"""Newest events tried for the clock's origin (one inside an open pause cannot place it)."""


class AttemptProgress(BaseModel):
    attempt_id: int
    environment: str
    agent: str
    working_s: float
    budget_s: float
    latest_score: float | None = None
    scored: bool = False
    """Whether any score call was made (`latest_score` None with `scored`: the latest was invalid)."""
    tokens: int = 0
    cost_usd: float = 0.0

    @property
    def left_s(self) -> float:
        """Working time left; the attempt ends at the latest when it is spent (its ETA from the budget)."""
        return max(0.0, self.budget_s - self.working_s)

    def score_text(self) -> str:
        if not self.scored:
            return "none yet"
        return "invalid" if self.latest_score is None else f"{self.latest_score:.4g}"

    def line(self) -> str:
        """One line for a log: `attempt 3 (counter, replay): 12s used, 48s left; latest score 7; 0 tokens; $0.0000`."""
        return (f"attempt {self.attempt_id} ({self.environment}, {self.agent}): "
                f"{format_duration(self.working_s)} used, {format_duration(self.left_s)} left; "
                f"latest score {self.score_text()}; {self.tokens} tokens; ${self.cost_usd:.4f}")


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _latest_offset(working_s: float, pauses: list[tuple[float, float]]) -> float | None:
    """The last wall offset at which the clock showed `working_s` (an event recorded as a pause
    ended sits at its end); None when that moment lies in a pause still open."""
    offset, worked = 0.0, 0.0
    for start, end in pauses:
        if worked + (start - offset) > working_s:
            break
        worked += start - offset
        if end == float("inf"):
            return None
        offset = end
    return offset + (working_s - worked)


def _working_now(events: list[tuple[float, datetime]], pause_rows: list[Pause], now: datetime) -> float:
    spans = merge((max(0.0, p.start_s), p.end_s if p.end_s is not None else float("inf")) for p in pause_rows)
    for working_s, created_at in events:  # newest first
        offset = _latest_offset(working_s, spans)
        if offset is None:
            continue
        now_offset = offset + (now - _aware(created_at)).total_seconds()
        clipped = [(a, min(b, now_offset)) for a, b in spans]
        return max(working_s, now_offset - covered(clipped, 0.0, now_offset))
    return max((w for w, _ in events), default=0.0)


def _one(session: Any, attempt: Attempt, now: datetime) -> AttemptProgress:
    events = [(float(w), c) for w, c in session.execute(
        select(Event.working_s, Event.created_at).where(Event.attempt_id == attempt.id)
        .order_by(Event.seq.desc()).limit(RECENT_EVENTS))]
    scores = list(session.execute(select(ScoreEvent.raw, ScoreEvent.valid, ScoreEvent.working_s,
                                         ScoreEvent.created_at).where(ScoreEvent.attempt_id == attempt.id)
                                  .order_by(ScoreEvent.id.desc()).limit(1)))
    events += [(float(w), c) for _, _, w, c in scores]
    events.sort(key=lambda e: _aware(e[1]), reverse=True)
    pauses = list(session.scalars(select(Pause).where(Pause.attempt_id == attempt.id)))
    working = _working_now(events, pauses, now)
    latest = scores[0] if scores else None
    return AttemptProgress(
        attempt_id=attempt.id, environment=attempt.environment, agent=attempt.agent,
        working_s=min(working, attempt.budget_s), budget_s=attempt.budget_s,
        latest_score=latest[0] if latest is not None and latest[1] else None, scored=latest is not None,
        tokens=attempt.input_tokens + attempt.output_tokens, cost_usd=attempt.cost_usd)


def running_attempts(store: Store, campaign_id: int, now: datetime | None = None) -> list[AttemptProgress]:
    """The campaign's running attempts (counted tries), by id."""
    moment = now or datetime.now(UTC)
    with store.session() as session:
        attempts = list(session.scalars(select(Attempt).where(
            Attempt.campaign_id == campaign_id, Attempt.status == AttemptStatus.RUNNING,
            Attempt.counted.is_(True)).order_by(Attempt.id)))
        return [_one(session, a, moment) for a in attempts]


def budget_eta_s(progress: CampaignProgress, running: list[AttemptProgress], queued_budget_s: float) -> float:
    """At most how long the campaign still runs, from the budgets: the running attempts' working
    time left plus a whole budget per queued one, over the attempts running at once (setup and
    paused time come on top; an agent that submits early ends sooner)."""
    left = sum(a.left_s for a in running) + progress.queued * queued_budget_s
    return left / max(len(running), 1)


def campaign_line(progress: CampaignProgress, running: list[AttemptProgress], queued_budget_s: float) -> str:
    """`campaign 4: 1/4 done, 1 running, 2 queued (2 waiting for CPUs); at most 2m30s of budgets left`."""
    eta = budget_eta_s(progress, running, queued_budget_s)
    return (f"campaign {progress.campaign_id}: {progress.counts_text()}, {progress.running} running, "
            f"{progress.queued_text()}; at most {format_duration(eta)} of budgets left")


def queued_budget(store: Store, campaign_id: int) -> float:
    """The budget of the campaign's queued attempts (one budget per campaign; 0 when none is queued)."""
    with store.session() as session:
        budget = session.scalar(select(Attempt.budget_s).where(
            Attempt.campaign_id == campaign_id, Attempt.status == AttemptStatus.QUEUED).limit(1))
    return float(budget or 0.0)
