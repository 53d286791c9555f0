"""Reading attempts out of the store as normalized run scores (the report only reads).

An attempt counts when it finished (`done` or `limit`), or failed through the agent's
own fault (`error` with error source `agent`, scoring what it had, else 0), and is
marked counted (retried infrastructure failures are not). Its score is the stored
normalized final score; for own attempts without one it is recomputed from the raw
final score and the environment's anchors. Attempts with a score log also carry their
score-over-time curve, which lets an attempt stand in for a shorter one.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import or_, select

from rebench.environments.metadata import Anchors, Profile
from rebench.errors import RebenchError
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.scoring.normalize import normalize
from rebench.store import Attempt, ScoreEvent, Store

SOURCES = ("own", "imported")
HUMAN_AGENT = "human"
HUMAN_ATTEMPT_S = 28800.0


@dataclass(frozen=True)
class ScorePoint:
    """The attempt's final-rule score as it stood from `working_s` on (normalized)."""

    working_s: float
    normalized: float


@dataclass(frozen=True)
class RunRecord:
    attempt_id: int
    environment: str
    agent: str
    source: str
    budget_s: float
    score: float
    campaign_id: int | None = None
    curve: tuple[ScorePoint, ...] | None = None  # None: no score log

    def score_at(self, working_s: float) -> float | None:
        """The score the attempt had reached by `working_s` of working time; None without a log."""
        if self.curve is None:
            return None
        reached = 0.0
        for point in self.curve:
            if point.working_s > working_s:
                break
            reached = point.normalized
        return reached


@dataclass(frozen=True)
class Filters:
    campaigns: Sequence[int] = ()
    environments: Sequence[str] = ()
    agents: Sequence[str] = ()
    source: str | None = None

    def __post_init__(self) -> None:
        if self.source is not None and self.source not in SOURCES:
            raise RebenchError(f"unknown source {self.source!r}; allowed: {', '.join(SOURCES)}")


@dataclass
class ReportData:
    runs: list[RunRecord]
    humans: list[RunRecord]  # human 8 h attempts: the yardstick, whatever the agent filters
    notes: list[str] = field(default_factory=list)


def _resolve_anchors(environment: str, profile_name: str, profile: Profile) -> Anchors:
    """Calibrated anchors when the calibration module provides them, else the declared ones."""
    try:
        calibration = importlib.import_module("rebench.calibration")
    except ImportError:
        return profile.anchors
    resolver = getattr(calibration, "resolve_anchors", None)
    if resolver is None:
        return profile.anchors
    try:
        resolved: Any = resolver(environment, profile_name)
    except Exception:  # an absent calibration must not break a report of finished work
        return profile.anchors
    return resolved if isinstance(resolved, Anchors) else getattr(resolved, "anchors", profile.anchors)


class _Normalizer:
    """Per (environment, profile): direction, final rule and anchors, looked up once."""

    def __init__(self, info: EnvironmentInfo) -> None:
        self.info = info
        self._cache: dict[tuple[str, str], tuple[Profile, Anchors] | None] = {}

    def spec(self, environment: str, profile: str) -> tuple[Profile, Anchors] | None:
        key = (environment, profile)
        if key not in self._cache:
            env = self.info.folder(environment)
            if env is None or profile not in env.metadata.profiles:
                self._cache[key] = None
            else:
                spec = env.profile(profile)
                self._cache[key] = (spec, _resolve_anchors(environment, profile, spec))
        return self._cache[key]

    def final(self, attempt: Attempt) -> float:
        if attempt.final_normalized is not None:
            return max(0.0, float(attempt.final_normalized))
        spec = self.spec(attempt.environment, attempt.profile)
        if spec is None or attempt.final_raw is None:
            return 0.0
        return normalize(attempt.final_raw, spec[1].start, spec[1].reference)

    def curve(self, attempt: Attempt, events: list[ScoreEvent]) -> tuple[ScorePoint, ...] | None:
        spec = self.spec(attempt.environment, attempt.profile)
        if spec is None or not events:
            return None
        profile, anchors = spec
        points: list[ScorePoint] = []
        standing: float | None = None
        for event in events:
            if not event.valid or event.raw is None or event.kind == "baseline":
                continue
            raw = float(event.raw)
            if standing is None or profile.final_score == "last":
                standing = raw
            elif profile.direction == "lower":
                standing = min(standing, raw)
            else:
                standing = max(standing, raw)
            points.append(ScorePoint(event.working_s, normalize(standing, anchors.start, anchors.reference)))
        return tuple(points)


def _counted(query: Any) -> Any:
    return query.where(
        Attempt.counted.is_(True),
        or_(
            Attempt.status.in_(("done", "limit")),
            (Attempt.status == "error") & (Attempt.error_source == "agent"),
        ),
    )


def load_report_data(store: Store, filters: Filters, info: EnvironmentInfo | None = None) -> ReportData:
    info = info or default_info()
    normalizer = _Normalizer(info)
    with store.session() as session:
        query = _counted(select(Attempt))
        if filters.environments:
            query = query.where(Attempt.environment.in_(list(filters.environments)))
        human_query = query.where(Attempt.agent == HUMAN_AGENT, Attempt.budget_s == HUMAN_ATTEMPT_S)
        if filters.campaigns:
            query = query.where(Attempt.campaign_id.in_(list(filters.campaigns)))
        if filters.agents:
            query = query.where(Attempt.agent.in_(list(filters.agents)))
        if filters.source:
            query = query.where(Attempt.source == filters.source)
        attempts = list(session.scalars(query.order_by(Attempt.id)))
        humans = list(session.scalars(human_query.order_by(Attempt.id)))
        own_ids = [a.id for a in attempts + humans if a.source == "own"]
        events: dict[int, list[ScoreEvent]] = {}
        for start in range(0, len(own_ids), 500):
            chunk = own_ids[start : start + 500]
            rows = session.scalars(
                select(ScoreEvent)
                .where(ScoreEvent.attempt_id.in_(chunk))
                .order_by(ScoreEvent.attempt_id, ScoreEvent.working_s, ScoreEvent.id)
            )
            for event in rows:
                events.setdefault(event.attempt_id, []).append(event)

        def record(attempt: Attempt) -> RunRecord:
            return RunRecord(
                attempt_id=attempt.id,
                environment=attempt.environment,
                agent=attempt.agent,
                source=attempt.source,
                budget_s=float(attempt.budget_s),
                score=normalizer.final(attempt),
                campaign_id=attempt.campaign_id,
                curve=normalizer.curve(attempt, events.get(attempt.id, [])),
            )

        return ReportData(runs=[record(a) for a in attempts], humans=[record(a) for a in humans])
