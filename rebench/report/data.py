"""Reading attempts out of the store as normalized run scores (the report only reads).

An attempt counts when it finished (`done`, `limit` or `error`, scoring what it had)
and is marked counted (an infrastructure failure that was retried is not); an
interrupted attempt says nothing about the agent. Own attempts are normalized from
their raw final score with the anchors in force (calibrated on this hardware, else
declared), or with their re-scoring window's anchors where it measured them
(rebench.scoring.window); imported ones carry METR's normalized score. Where the final score was re-scored
(final_rule = "rescore_best") that is the counted number, and RE-Bench's rule is carried beside it.
Attempts with a score log also carry their score-over-time curve, which lets an attempt stand in
for a shorter one.

Own attempts with network (`rebench run --network full`) are never pooled with those without:
their agent label carries NETWORK_MARK, so every group, row and plot keeps them apart."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from rebench.calibration import resolve_anchors
from rebench.environments.metadata import Profile
from rebench.errors import RebenchError
from rebench.gateway.usage import MeterUsage, gateway_usage
from rebench.network import NetworkPolicy
from rebench.report.heldout import heldout_fields
from rebench.report.heldout import notes as heldout_notes
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.scoring.normalize import ResolvedAnchors, normalize
from rebench.scoring.window import final_anchors
from rebench.store import Attempt, ScoreEvent, Store
from rebench.store.models import Campaign, HumanSession, Pause, PauseCorrection
from rebench.store.worktime import corrected_at, working_time

SOURCES = ("own", "imported")
HUMAN_AGENT = "human"
HUMAN_ATTEMPT_S = 28800.0
COUNTED_STATUSES = ("done", "limit", "error")  # finished; an interrupted attempt says nothing
NETWORK_MARK = " (network full)"
"""Ends the agent label of own attempts that ran with network: they are not comparable with the rest."""


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
    anchors: str = "declared"  # declared | calibrated | window | imported | stored
    profile: str = ""
    campaign_id: int | None = None
    curve: tuple[ScorePoint, ...] | None = None  # None: no score log
    submitted: bool = True  # False: the attempt ended (budget, error, gave up) without submitting
    rule_score: float | None = None
    """Normalized by RE-Bench's own rule (best or last intermediate score) where the counted
    `score` was re-scored (final_rule = "rescore_best"); None otherwise."""
    human: HumanClock | None = None
    """Own human attempts: who, and working time with and without pause corrections."""
    gateway: MeterUsage | None = None
    """The agent's requests through the environment's model gateway (rebench.gateway); None: none."""
    network: str = NetworkPolicy.NONE.value
    """The sandbox's network (rebench.network); imported METR runs are `full`."""
    cost_usd: float | None = None
    """Dollars spent (the agent's model plus its gateway requests; METR's `dollar_equivalent` for
    imported runs); None where nothing was recorded, which is not the same as free."""
    tokens: int | None = None
    """The agent's model tokens (input + output); None where no model was recorded."""
    working_s: float | None = None
    """Working time the attempt used (own attempts); None for imported runs."""
    heldout_score: float | None = None
    """The held-out final, normalized with its split's anchors (rebench.report.heldout); None: none."""
    best_intermediate: float | None = None
    """The best intermediate score, normalized, where there is a held-out final to set it beside."""
    probing: bool = False
    """The held-out final is more than the split's margin below the best intermediate score."""
    calls_per_hour: float | None = None
    """Intermediate score calls per working hour (own attempts)."""
    heldout_anchors: str | None = None
    """Kind of the anchors behind `heldout_score`: calibrated or declared."""
    original_score: float | None = None
    """With `report --rescored RUN` (rebench.report.rescored): the score as originally recorded, `score`
    being the re-score; None otherwise."""

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
class HumanClock:
    """An own human attempt's expert and working time as recorded and as corrected (`rebench human
    adjust`); its score log's times are the corrected ones."""

    expert: str
    working_s: float
    corrected_working_s: float
    corrections: int


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


class Normalizer:
    """Per (environment, profile): direction, final rule and anchors, looked up once."""

    def __init__(self, store: Store, info: EnvironmentInfo) -> None:
        self.store = store
        self.info = info
        self._cache: dict[tuple[str, str], tuple[Profile, ResolvedAnchors] | None] = {}

    def spec(self, environment: str, profile: str) -> tuple[Profile, ResolvedAnchors] | None:
        """Direction, final rule and anchors in force (calibrated here, else declared)."""
        key = (environment, profile)
        if key not in self._cache:
            env = self.info.folder(environment)
            if env is None or profile not in env.metadata.profiles:
                self._cache[key] = None
            else:
                self._cache[key] = (env.profile(profile), resolve_anchors(self.store, env, profile))
        return self._cache[key]

    def rule(self, attempt: Attempt) -> float | None:
        """RE-Bench's rule, normalized like `final`, for an attempt whose final score was re-scored."""
        if attempt.final_rule != "rescore_best":
            return None
        spec = self.spec(attempt.environment, attempt.profile)
        if spec is not None:
            return normalize(attempt.rule_raw, spec[1].start, spec[1].reference)
        return max(0.0, float(attempt.rule_normalized)) if attempt.rule_normalized is not None else 0.0

    def final(self, attempt: Attempt, events: Sequence[ScoreEvent] = ()) -> tuple[float, str]:
        """The normalized final score and the kind of anchors behind it.

        Own attempts are normalized from the raw score (the source of truth) with the anchors
        their re-scoring window measured (`events`: their score rows, rebench.scoring.window),
        else with the anchors in force; without the environment folder the stored value is used.
        """
        spec = self.spec(attempt.environment, attempt.profile) if attempt.source == "own" else None
        if spec is not None:
            anchors = final_anchors(attempt.final_rule, events, spec[0].direction, spec[1])
            return normalize(attempt.final_raw, anchors.start, anchors.reference), anchors.kind
        stored = attempt.final_normalized
        kind = attempt.anchors_kind or ("imported" if attempt.source == "imported" else "stored")
        return (max(0.0, float(stored)) if stored is not None else 0.0), kind

    def curve(self, attempt: Attempt, events: list[ScoreEvent], final: float | None = None,
              at: Callable[[float], float] | None = None) -> tuple[ScorePoint, ...] | None:
        """The standing over working time (`at` maps a score's recorded working time, e.g. to the
        corrected one). For a re-scored attempt (`final` given) the intermediate scores are single
        noisy calls, so no point stands above the re-scored final."""
        spec = self.spec(attempt.environment, attempt.profile)
        if spec is None or not events:
            return None
        profile, anchors = spec
        points: list[ScorePoint] = []
        standing: float | None = None
        for event in events:
            if not event.valid or event.raw is None or event.kind != "intermediate":  # as the runner's final
                continue
            raw = float(event.raw)
            if standing is None or (attempt.final_rule or profile.final_score) == "last":
                standing = raw
            elif profile.direction == "lower":
                standing = min(standing, raw)
            else:
                standing = max(standing, raw)
            value = normalize(standing, anchors.start, anchors.reference)
            when = event.working_s if at is None else at(event.working_s)
            points.append(ScorePoint(when, value if final is None else min(value, final)))
        return tuple(points)


def _counted(query: Any) -> Any:
    return query.where(Attempt.counted.is_(True), Attempt.status.in_(COUNTED_STATUSES))


def agent_label(attempt: Attempt) -> str:
    """Own attempts are told apart by model too (`modular/claude-...`), and by NETWORK_MARK when they
    ran with network; METR's alias already names the model (and all of METR's runs had network)."""
    if attempt.source != "own":
        return attempt.agent
    label = f"{attempt.agent}/{attempt.model}" if attempt.model and attempt.agent != HUMAN_AGENT else attempt.agent
    return label + NETWORK_MARK if attempt.network == NetworkPolicy.FULL else label


def network_notes(runs: list[RunRecord]) -> list[str]:
    """What the report says about network: which own attempts had it, and that METR's runs all did."""
    own = [r for r in runs if r.source == "own"]
    with_network = sum(r.network == NetworkPolicy.FULL for r in own)
    notes = []
    if with_network:
        notes.append(f"{with_network} own attempt(s) ran with network (`rebench run --network full`): their agent "
                     f"label ends in '{NETWORK_MARK.strip()}' and they are never pooled with attempts without network")
    if with_network < len(own) and any(r.source == "imported" for r in runs):
        notes.append("METR's imported runs had internet access (RE-Bench gave every task full internet); own "
                     f"attempts not marked '{NETWORK_MARK.strip()}' had none: comparisons across the two are "
                     "indicative only")
    return notes


def _human_clocks(
    session: Session, attempts: list[Attempt]
) -> dict[int, tuple[HumanClock, Callable[[float], float] | None]]:
    """Own human attempts' experts and working times, with the mapping of their score log's times
    to corrected working time (None where there are no corrections)."""
    ids = sorted({a.id for a in attempts})
    if not ids:
        return {}
    experts = {h.attempt_id: h for h in session.scalars(select(HumanSession).where(HumanSession.attempt_id.in_(ids)))}
    pauses: dict[int, list[Pause]] = defaultdict(list)
    for pause in session.scalars(select(Pause).where(Pause.attempt_id.in_(ids)).order_by(Pause.id)):
        pauses[pause.attempt_id].append(pause)
    corrections: dict[int, list[PauseCorrection]] = defaultdict(list)
    for row in session.scalars(select(PauseCorrection).where(PauseCorrection.attempt_id.in_(ids))
                               .order_by(PauseCorrection.id)):
        corrections[row.attempt_id].append(row)
    out: dict[int, tuple[HumanClock, Callable[[float], float] | None]] = {}
    for attempt in {a.id: a for a in attempts}.values():
        human = experts.get(attempt.id)
        own_pauses, own_corrections = pauses[attempt.id], corrections[attempt.id]
        spent = working_time(attempt, own_pauses, own_corrections, human)
        clock = HumanClock(expert=human.expert if human else "", working_s=spent.uncorrected_s,
                           corrected_working_s=spent.corrected_s, corrections=len(own_corrections))
        at = partial(corrected_at, pauses=own_pauses, corrections=own_corrections) if own_corrections else None
        out[attempt.id] = (clock, at)
    return out


def unmatched_filter(store: Store, filters: Filters) -> str | None:
    """One line naming the first filter value that matches no attempt in the database, and the
    values that exist; None when every value matches something. (A typo must not quietly give a
    report of everything else, or of the humans only.)"""
    with store.session() as session:
        campaigns = sorted(session.scalars(select(Campaign.id)))
        attempts = session.execute(select(Attempt.environment, Attempt.agent, Attempt.model).distinct()).all()
    environments = sorted({row[0] for row in attempts})
    agents = {row[1] for row in attempts} | {f"{row[1]}/{row[2]}" for row in attempts if row[2]}
    checks: list[tuple[str, Sequence[object], Sequence[object]]] = [
        ("campaign", filters.campaigns, campaigns), ("environment", filters.environments, environments),
        ("agent", filters.agents, sorted(agents)),
    ]
    for what, given, existing in checks:
        for value in given:
            if value not in existing:
                shown = ", ".join(map(str, existing[:20])) + (" ..." if len(existing) > 20 else "") or "none"
                return f"no attempts of {what} {value!r} in this database; {what}s there: {shown}"
    return None


def _spend(attempt: Attempt, gateway: MeterUsage | None) -> dict[str, Any]:
    """Cost, tokens and working time as recorded; a zero cost is "not recorded", never "free"."""
    cost = float(attempt.cost_usd or 0.0) + (gateway.cost_usd if gateway else 0.0)
    tokens = int(attempt.input_tokens or 0) + int(attempt.output_tokens or 0)
    own = attempt.source == "own"
    return {"cost_usd": cost if cost > 0 else None, "tokens": tokens if own and attempt.model else None,
            "working_s": float(attempt.working_s) if own else None}


def load_report_data(store: Store, filters: Filters, info: EnvironmentInfo | None = None) -> ReportData:
    info = info or default_info()
    normalizer = Normalizer(store, info)
    with store.session() as session:
        query = _counted(select(Attempt))
        if filters.environments:
            query = query.where(Attempt.environment.in_(list(filters.environments)))
        human_query = query.where(Attempt.agent == HUMAN_AGENT, Attempt.budget_s == HUMAN_ATTEMPT_S)
        if filters.campaigns:
            query = query.where(Attempt.campaign_id.in_(list(filters.campaigns)))
        if filters.agents:
            wanted = list(filters.agents)
            query = query.where(or_(Attempt.agent.in_(wanted), (Attempt.agent + "/" + Attempt.model).in_(wanted)))
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

        gateway = {attempt_id: meters["agent"] for attempt_id, meters in gateway_usage(session, own_ids).items()
                   if "agent" in meters}
        clocks = _human_clocks(session, [a for a in attempts + humans if a.source == "own" and a.agent == HUMAN_AGENT])

        def record(attempt: Attempt) -> RunRecord:
            score, anchors = normalizer.final(attempt, events.get(attempt.id, []))
            rule = normalizer.rule(attempt)
            clock, at = clocks.get(attempt.id, (None, None))
            return RunRecord(
                attempt_id=attempt.id,
                environment=attempt.environment,
                agent=agent_label(attempt),
                source=attempt.source,
                budget_s=float(attempt.budget_s),
                score=score,
                anchors=anchors,
                profile=attempt.profile,
                campaign_id=attempt.campaign_id,
                curve=normalizer.curve(attempt, events.get(attempt.id, []), None if rule is None else score, at),
                submitted=bool(attempt.submitted),
                rule_score=rule,
                human=clock,
                gateway=gateway.get(attempt.id),
                network=str(attempt.network),
                **_spend(attempt, gateway.get(attempt.id)),
                **heldout_fields(attempt, events.get(attempt.id, []), normalizer.spec(attempt.environment,
                                                                                      attempt.profile)),
            )

        runs, people = [record(a) for a in attempts], [record(a) for a in humans]
        once = list({r.attempt_id: r for r in runs + people}.values())  # human attempts may be in both
        return ReportData(runs=runs, humans=people, notes=network_notes(once) + heldout_notes(runs))
