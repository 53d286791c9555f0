"""Building the report: score@k rows per allocation, best allocations, standing among experts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from rebench.budget import format_duration
from rebench.errors import RebenchError
from rebench.gateway.usage import MeterUsage
from rebench.report import heldout
from rebench.report.allocation import CURVE_KS, Allocation, allocation_for
from rebench.report.bootstrap import (
    DEFAULT_N_BOOTSTRAP,
    DEFAULT_SEED,
    EnvironmentScores,
    bootstrap_score_at_k,
)
from rebench.report.data import HUMAN_AGENT, HUMAN_ATTEMPT_S, ReportData, RunRecord
from rebench.report.estimators import ESTIMATORS, EstimatorName
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.percentiles import human_percentile_curve, locate_on_curve

ALL = "all"
PLAUSIBLE_MAX = 2.0  # the paper never saw a normalized score above 2 after its review
HEADLINE_TOTALS_S = (7200.0, 28800.0, 57600.0, 115200.0)  # the headline table: 2h, 8h, 16h, 32h
CURVE_MAX_TOTAL_S = 64 * 3600.0  # the plot's x range: the paper's budgets up to Claude's 30min@128


class ReportSettings(BaseModel):
    """How the numbers were computed; printed with every report."""

    estimator: EstimatorName = "expected_max"
    n_bootstrap: int = Field(DEFAULT_N_BOOTSTRAP, ge=1)
    seed: int = DEFAULT_SEED
    total_budgets_s: tuple[float, ...]
    compare_at_s: float = 28800.0
    exclude_above: float | None = Field(None, description="leave out runs scoring above this; None keeps all")
    strict: bool = Field(False, description="leave out estimates with k above the runs behind them")


class ScoreRow(BaseModel):
    """One estimate: one environment (or `all`, the equal-weight average) at one allocation.

    Each row is self-describing (estimator, resamples, seed), so `--json` and the CSV are
    just a list of rows. `n`, `mean` and `best` describe the run scores behind the estimate.
    """

    environment: str
    agent: str
    source: str
    budget_s: float = Field(description="per-attempt budget of the attempts used")
    k: int
    total_s: float = Field(description="total budget per environment: k x per-attempt, or the cut length")
    truncated: bool = False
    estimator: str
    n_bootstrap: int
    seed: int
    best_of_k: str = Field(description="max, mean (score hidden), or mixed for `all`")
    point: float
    low: float = Field(description="2.5th percentile of the bootstrap replicates")
    high: float = Field(description="97.5th percentile of the bootstrap replicates")
    n: int = Field(description="runs used (summed over environments for `all`)")
    min_n: int = Field(description="fewest runs of any environment; k above it is capped there")
    envs: int
    mean: float = Field(description="mean run score (for `all`: averaged over environments)")
    best: float = Field(description="best run score (for `all`: averaged over environments)")
    anchors: str = Field(description="anchors behind the scores: declared, calibrated, imported")
    best_allocation: bool = Field(False, description="the highest estimate at this total budget")
    comparable: bool = Field(
        True,
        description="False: covers fewer environments than another allocation of this agent at this "
        "total, so it is not compared with them",
    )
    not_submitted: int = Field(0, description="runs behind the row that ended without submitting")
    above_2: int = Field(0, description="runs behind the row scoring above 2 (implausible after review)")
    rescored: int = Field(0, description="runs behind the row whose final score was re-scored (rescore_best)")
    rule_mean: float | None = Field(
        None, description="where runs were re-scored: `mean` by RE-Bench's own rule (the best single score call)"
    )
    original_mean: float | None = Field(
        None, description="with `report --rescored RUN`: `mean` as originally scored (the re-scored runs' own scores)"
    )
    heldout_mean: float | None = Field(None, description="final on held-out: the mean normalized held-out final of "
                                       "the runs that have one (profiles with `final_split`)")
    human_percentile: float | None = Field(
        None, description="for an agent's best `all` row: the human 8 h percentile it matches"
    )
    gateway_requests: int = Field(0, description="the agents' requests through the environments' model gateway, "
                                  "summed over the runs behind the row (refused ones included)")
    gateway_refused: int = Field(0, description="of those, refused (credit spent, another model, ...)")
    gateway_input_tokens: int = 0
    gateway_output_tokens: int = 0
    gateway_cost_usd: float = Field(0.0, description="what those requests cost (notional prices for a local model)")


class Standing(BaseModel):
    """An agent's best allocation at one total budget, located among the human 8 h scores."""

    agent: str
    source: str
    total_s: float
    allocation: str
    point: float
    human_percentile: float
    envs: int


class AttemptSummary(BaseModel):
    """Per environment, agent and per-attempt budget: how many attempts and how they scored."""

    environment: str
    agent: str
    source: str
    budget_s: float
    n: int
    not_submitted: int = Field(0, description="attempts that ended without submitting")
    mean: float
    best: float
    anchors: str = Field(description="kinds of anchors behind the normalized scores: declared, calibrated, imported")
    rescored: int = Field(0, description="attempts whose final score was re-scored (final_rule = rescore_best)")
    rule_mean: float | None = Field(None, description="mean normalized score by RE-Bench's own rule (best "
                                    "intermediate score); set when some attempts were re-scored")
    gateway: MeterUsage | None = Field(None, description="the agent's model gateway usage, summed over the attempts")
    original_mean: float | None = Field(None, description="with `report --rescored RUN`: `mean` as originally scored")
    heldout_mean: float | None = Field(None, description="final on held-out: mean normalized held-out final score "
                                       "of the attempts that have one (rebench.report.heldout)")
    heldout_n: int = 0


class AgentSummary(BaseModel):
    """Per agent: attempts, how many ended without submitting or score above 2, and what those do to
    its headline number (the best allocation at the report's `--at` total)."""

    agent: str
    source: str
    attempts: int
    not_submitted: int
    above_2: int
    total_s: float
    allocation: str | None
    score: float | None
    allocation_without_above_2: str | None = None
    score_without_above_2: float | None = None
    heldout_gap: float | None = Field(None, description="mean of best intermediate minus held-out final (normalized)")
    heldout_gap_low: float | None = None
    heldout_gap_high: float | None = None
    heldout_n: int = 0
    probing: int = Field(0, description="attempts whose held-out final is more than the split's margin below "
                         "their best intermediate score")
    calls_per_hour: float | None = Field(None, description="mean intermediate score calls per working hour")


class HeadlineRow(BaseModel):
    """Best agent against human experts at one total time budget per environment."""

    total_s: float
    agent: str | None = None
    agent_source: str | None = None
    allocation: str | None = None
    agent_score: float | None = None
    agent_envs: int = 0
    human_allocation: str | None = None
    human_score: float | None = None
    human_envs: int = 0
    ratio: float | None = None
    same_environments: bool = False
    human_data: str = Field(description="whether humans have data at this total, and why not")


class HumanSummary(BaseModel):
    """Our human 8 h attempts in the shape of the paper's printed figures."""

    runs: int
    mean: float
    fraction_nonzero: float
    fraction_at_or_above_reference: float
    per_environment: dict[str, tuple[int, float]]  # environment -> (runs, best)


class HumanAttemptRow(BaseModel):
    """One own human attempt: its expert and working time with and without pause corrections."""

    attempt_id: int
    environment: str
    expert: str
    budget_s: float
    score: float
    working_s: float = Field(description="as recorded (the clock the budget was enforced on)")
    corrected_working_s: float = Field(description="without the pauses added afterwards by `rebench human adjust`")
    corrections: int


@dataclass
class Report:
    settings: ReportSettings
    rows: list[ScoreRow]
    curves: list[ScoreRow]  # `all` rows at k = 1..128 (and cut lengths), for the plot
    standings: list[Standing]
    summary: list[AttemptSummary]
    humans: HumanSummary | None
    data: ReportData
    notes: list[str]
    agents: list[AgentSummary] = field(default_factory=list)
    headline: list[HeadlineRow] = field(default_factory=list)
    human_attempts: list[HumanAttemptRow] = field(default_factory=list)


_T = TypeVar("_T")
GroupKey = tuple[str, str, float]  # agent, source, per-attempt budget


def _groups(runs: Iterable[RunRecord]) -> dict[GroupKey, list[RunRecord]]:
    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(run.agent, run.source, run.budget_s)].append(run)
    return dict(groups)


def _by_env(values: Iterable[tuple[str, _T]]) -> dict[str, list[_T]]:
    out: dict[str, list[_T]] = defaultdict(list)
    for env, value in values:
        out[env].append(value)
    return dict(out)


def _kinds_by_env(values: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for env, kind in values:
        out[env].add(kind)
    return dict(out)


class _Builder:
    def __init__(self, settings: ReportSettings, info: EnvironmentInfo) -> None:
        self.settings = settings
        self.info = info

    def rows(
        self,
        key: GroupKey,
        scored: dict[str, list[tuple[float, RunRecord]]],
        allocations: Sequence[Allocation],
        anchors: dict[str, str],
    ) -> list[ScoreRow]:
        """Per-environment and `all` rows for allocations that share one set of scores."""
        agent, source, _ = key
        if not scored or not allocations:
            return []
        scores = {env: [value for value, _ in pairs] for env, pairs in scored.items()}
        data = {
            env: EnvironmentScores(np.asarray(values, dtype=np.float64), self.info.best_of_k(env))
            for env, values in scores.items()
        }
        result = bootstrap_score_at_k(
            data,
            [a.k for a in allocations],
            self.settings.estimator,
            self.settings.n_bootstrap,
            self.settings.seed,
        )
        modes = {data[env].best_of_k for env in result.environments}
        mode = next(iter(modes)) if len(modes) == 1 else "mixed"
        counts = [len(scores[env]) for env in result.environments]
        means = [float(np.mean(scores[env])) for env in result.environments]
        bests = [float(np.max(scores[env])) for env in result.environments]
        kinds = [anchors.get(env, "") for env in result.environments]
        unsubmitted = [sum(not run.submitted for _, run in scored[env]) for env in result.environments]
        high = [sum(value > PLAUSIBLE_MAX for value, _ in scored[env]) for env in result.environments]
        rescored = [sum(run.rule_score is not None for _, run in scored[env]) for env in result.environments]
        rule_means = [float(np.mean([value if run.rule_score is None else run.rule_score
                                     for value, run in scored[env]])) for env in result.environments]
        gateways = [gateway_total(run for _, run in scored[env]) for env in result.environments]
        originals = [[run.original_score for _, run in scored[env]] for env in result.environments]
        original_means = [None if None in o else float(np.mean(o)) for o in originals]  # type: ignore[arg-type]
        heldouts = [heldout.summary_fields([run for _, run in scored[env]]).get("heldout_mean")
                    for env in result.environments]
        rows = []
        for j, alloc in enumerate(allocations):
            common = {
                "agent": agent,
                "source": source,
                "budget_s": alloc.budget_s,
                "k": alloc.k,
                "total_s": alloc.total_s,
                "truncated": alloc.truncated,
                "estimator": self.settings.estimator,
                "n_bootstrap": self.settings.n_bootstrap,
                "seed": self.settings.seed,
            }
            for i, env in enumerate(result.environments):
                rows.append(
                    ScoreRow(
                        environment=env,
                        best_of_k=data[env].best_of_k,
                        point=float(result.per_env_point[i, j]),
                        low=float(result.per_env_low[i, j]),
                        high=float(result.per_env_high[i, j]),
                        n=counts[i],
                        min_n=counts[i],
                        envs=1,
                        mean=means[i],
                        best=bests[i],
                        anchors=kinds[i],
                        not_submitted=unsubmitted[i],
                        above_2=high[i],
                        rescored=rescored[i],
                        rule_mean=rule_means[i] if rescored[i] and not alloc.truncated else None,
                        original_mean=None if alloc.truncated else original_means[i],
                        heldout_mean=None if alloc.truncated else heldouts[i],
                        **_gateway_fields(gateways[i]),
                        **common,
                    )
                )
            rows.append(
                ScoreRow(
                    environment=ALL,
                    best_of_k=mode,
                    point=float(result.mean_point[j]),
                    low=float(result.mean_low[j]),
                    high=float(result.mean_high[j]),
                    n=sum(counts),
                    min_n=min(counts),
                    envs=len(counts),
                    mean=float(np.mean(means)),
                    best=float(np.mean(bests)),
                    anchors=",".join(sorted(set(",".join(kinds).split(",")) - {""})),
                    not_submitted=sum(unsubmitted),
                    above_2=sum(high),
                    rescored=sum(rescored),
                    rule_mean=float(np.mean(rule_means)) if any(rescored) and not alloc.truncated else None,
                    original_mean=(None if alloc.truncated or None in original_means
                                   else float(np.mean(original_means))),  # type: ignore[arg-type]
                    **_gateway_fields(gateway_sum(gateways)),
                    **common,
                )
            )
        return rows

    def group(self, key: GroupKey, runs: list[RunRecord], totals: Sequence[float]) -> list[ScoreRow]:
        budget_s = key[2]
        whole: list[Allocation] = []
        cut: list[Allocation] = []
        anchors = {
            env: ",".join(sorted(kinds))
            for env, kinds in _kinds_by_env((r.environment, r.anchors) for r in runs).items()
        }
        for total in sorted({budget_s, *totals}):  # an attempt's own length is always an allocation
            alloc = allocation_for(total, budget_s)
            if alloc is None:
                continue
            (cut if alloc.truncated else whole).append(alloc)
        rows = self.rows(key, _by_env((r.environment, (r.score, r)) for r in runs), whole, anchors)
        for alloc in cut:
            logged = ((r, r.score_at(alloc.total_s)) for r in runs)
            scored = _by_env((r.environment, (value, r)) for r, value in logged if value is not None)
            rows.extend(self.rows(key, scored, [alloc], anchors))
        return rows


AllocationKey = tuple[str, str, float, int, float, bool]


def _allocation_key(row: ScoreRow) -> AllocationKey:
    return (row.agent, row.source, row.budget_s, row.k, row.total_s, row.truncated)


def _env_sets(rows: Iterable[ScoreRow]) -> dict[AllocationKey, frozenset[str]]:
    """The environments behind each allocation's `all` row (from its per-environment rows)."""
    out: dict[AllocationKey, set[str]] = defaultdict(set)
    for row in rows:
        if row.environment != ALL:
            out[_allocation_key(row)].add(row.environment)
    return {key: frozenset(envs) for key, envs in out.items()}


def _mark_best(rows: list[ScoreRow]) -> list[str]:
    """Per agent, source, environment and total budget, mark the allocation with the highest estimate.

    `all` rows average over the environments an allocation has runs for, so only allocations
    covering every environment any allocation of the agent covers at that total compete; the
    others are marked not comparable. Returns a note for each total where none covers them all.
    """
    env_sets = _env_sets(rows)
    groups: dict[tuple[str, str, str, float], list[ScoreRow]] = defaultdict(list)
    for row in rows:
        groups[(row.agent, row.source, row.environment, row.total_s)].append(row)
    notes = []
    for (agent, source, environment, total_s), members in groups.items():
        if environment == ALL:
            sets = {id(row): env_sets.get(_allocation_key(row), frozenset()) for row in members}
            union = frozenset().union(*sets.values())
            for row in members:
                row.comparable = sets[id(row)] == union
            members = [row for row in members if row.comparable]
            if not members:
                notes.append(
                    f"{agent} ({source}) at {format_duration(total_s)}: no allocation covers all "
                    f"{len(union)} environments its attempts cover, so none is marked best"
                )
                continue
        max(members, key=lambda r: r.point).best_allocation = True  # the first of equal estimates
    return notes


def gateway_sum(usages: Iterable[MeterUsage | None]) -> MeterUsage | None:
    """Usage added up; None when none of them used the gateway."""
    found = [u for u in usages if u is not None]
    if not found:
        return None
    return MeterUsage(requests=sum(u.requests for u in found), refused=sum(u.refused for u in found),
                      input_tokens=sum(u.input_tokens for u in found),
                      output_tokens=sum(u.output_tokens for u in found), cost_usd=sum(u.cost_usd for u in found))


def _gateway_fields(usage: MeterUsage | None) -> dict[str, Any]:
    """ScoreRow's flat gateway columns (a frame column each in rebench.analysis)."""
    if usage is None:
        return {}
    return {"gateway_requests": usage.requests, "gateway_refused": usage.refused,
            "gateway_input_tokens": usage.input_tokens, "gateway_output_tokens": usage.output_tokens,
            "gateway_cost_usd": usage.cost_usd}


def gateway_total(runs: Iterable[RunRecord]) -> MeterUsage | None:
    return gateway_sum(run.gateway for run in runs)


def _summaries(runs: Iterable[RunRecord]) -> list[AttemptSummary]:
    groups: dict[tuple[str, str, str, float], list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(run.environment, run.agent, run.source, run.budget_s)].append(run)
    return [
        AttemptSummary(
            environment=env,
            agent=agent,
            source=source,
            budget_s=budget,
            n=len(members),
            not_submitted=sum(not r.submitted for r in members),
            mean=float(np.mean([r.score for r in members])),
            best=max(r.score for r in members),
            anchors=",".join(sorted({r.anchors for r in members})),
            rescored=sum(r.rule_score is not None for r in members),
            rule_mean=(float(np.mean([r.score if r.rule_score is None else r.rule_score for r in members]))
                       if any(r.rule_score is not None for r in members) else None),
            gateway=gateway_total(members),
            original_mean=(None if any(r.original_score is None for r in members)
                           else float(np.mean([r.original_score for r in members]))),
            **heldout.summary_fields(members),
        )
        for (env, agent, source, budget), members in sorted(groups.items())
    ]


def _human_summary(humans: list[RunRecord]) -> HumanSummary | None:
    if not humans:
        return None
    scores = np.asarray([h.score for h in humans])
    per_env = _by_env((h.environment, h.score) for h in humans)
    return HumanSummary(
        runs=len(humans),
        mean=float(scores.mean()),
        fraction_nonzero=float(np.mean(scores > 0)),
        fraction_at_or_above_reference=float(np.mean(scores >= 1.0)),
        per_environment={env: (len(v), max(v)) for env, v in sorted(per_env.items())},
    )


def _standings(rows: list[ScoreRow], humans: list[RunRecord]) -> list[Standing]:
    """Locate each agent's best `all` row among the human 8 h scores of the same environments."""
    human_scores = _by_env((h.environment, h.score) for h in humans)
    envs_of = _env_sets(rows)
    out = []
    for row in rows:
        if row.environment != ALL or not row.best_allocation or row.agent == HUMAN_AGENT:
            continue
        envs = envs_of.get(_allocation_key(row), frozenset())
        if not envs or not envs <= set(human_scores):
            continue  # the human curve must cover the same environments as the agent's average
        curve = human_percentile_curve({env: human_scores[env] for env in sorted(envs)})
        row.human_percentile = locate_on_curve(row.point, curve)
        out.append(
            Standing(
                agent=row.agent,
                source=row.source,
                total_s=row.total_s,
                allocation=Allocation(row.budget_s, row.k, row.total_s, row.truncated).label,
                point=row.point,
                human_percentile=row.human_percentile,
                envs=row.envs,
            )
        )
    return out


def _unique(runs: Iterable[RunRecord]) -> list[RunRecord]:
    """Runs once each: human attempts sit both in `runs` (unless filtered out) and in `humans`."""
    return list({run.attempt_id: run for run in runs}.values())


def _best_all(rows: Iterable[ScoreRow], agent: str, source: str, total_s: float) -> ScoreRow | None:
    wanted = (agent, source, total_s, ALL, True)
    return next((r for r in rows if (r.agent, r.source, r.total_s, r.environment, r.best_allocation) == wanted), None)


def beyond_data(row: ScoreRow) -> bool:
    """k above the runs behind the estimate: it is then only the best of those runs."""
    return row.k > row.min_n


def _label(row: ScoreRow) -> str:
    """The allocation, marked `†` when k exceeds the runs behind it (`10m@192†`; the notes say how many)."""
    label = Allocation(row.budget_s, row.k, row.total_s, row.truncated).label
    return f"{label}†" if beyond_data(row) else label


def _agent_summaries(
    builder: _Builder, loaded: list[RunRecord], rows: list[ScoreRow], total_s: float
) -> list[AgentSummary]:
    """Per agent: attempts (as loaded), those without a submission or above 2, and the headline at
    `total_s` as reported and recomputed without the runs above 2."""
    by_agent: dict[tuple[str, str], list[RunRecord]] = defaultdict(list)
    for run in loaded:
        by_agent[(run.agent, run.source)].append(run)
    out = []
    for (agent, source), runs in sorted(by_agent.items()):
        best = _best_all(rows, agent, source, total_s)
        summary = AgentSummary(
            agent=agent,
            source=source,
            attempts=len(runs),
            not_submitted=sum(not r.submitted for r in runs),
            above_2=sum(r.score > PLAUSIBLE_MAX for r in runs),
            total_s=total_s,
            allocation=_label(best) if best else None,
            score=best.point if best else None,
            **heldout.agent_fields(runs, builder.settings.n_bootstrap, builder.settings.seed),
        )
        if summary.above_2:
            kept = [r for r in runs if r.score <= PLAUSIBLE_MAX]
            groups = sorted(_groups(kept).items())
            again = [row for key, members in groups for row in builder.group(key, members, [total_s])]
            _mark_best(again)
            without = _best_all(again, agent, source, total_s)
            summary.allocation_without_above_2 = _label(without) if without else None
            summary.score_without_above_2 = without.point if without else None
        out.append(summary)
    return out


def _human_gap(total_s: float, humans: list[RunRecord], settings: ReportSettings) -> str:
    """Why humans have no row at `total_s`."""
    if total_s not in settings.total_budgets_s:
        return "not computed: this total is not in --budgets"
    if not humans:
        return "no: no human 8 h attempts in the store"
    if total_s < HUMAN_ATTEMPT_S:
        if not any(h.curve for h in humans):
            return (
                f"no: human attempts are 8 h and none has a score log (METR's export has none), so "
                f"there is no human score at {format_duration(total_s)}"
            )
        return f"no: no human attempt's score log reaches {format_duration(total_s)}"
    return f"no: {format_duration(total_s)} is not a whole number of 8 h human attempts"


def _headline(rows: list[ScoreRow], humans: list[RunRecord], settings: ReportSettings) -> list[HeadlineRow]:
    """Best agent against the humans at 2h, 8h, 16h and 32h total per environment.

    The best agent is the highest best-allocation average among the agents covering the most
    environments at that total (an average over fewer environments is not comparable).
    """
    env_sets = _env_sets(rows)
    best = [r for r in rows if r.environment == ALL and r.best_allocation]
    out = []
    for total_s in HEADLINE_TOTALS_S:
        at = [r for r in best if r.total_s == total_s]
        agents = [r for r in at if r.agent != HUMAN_AGENT]
        people = [r for r in at if r.agent == HUMAN_AGENT]
        line = HeadlineRow(total_s=total_s, human_data="yes")
        top = max(agents, key=lambda r: (r.envs, r.point), default=None)
        human = max(people, key=lambda r: (r.envs, r.point), default=None)
        if top is not None:
            line.agent, line.agent_source = top.agent, top.source
            line.allocation, line.agent_score, line.agent_envs = _label(top), top.point, top.envs
        if human is None:
            line.human_data = _human_gap(total_s, humans, settings)
        else:
            line.human_allocation, line.human_score, line.human_envs = _label(human), human.point, human.envs
            line.human_data = f"yes ({line.human_allocation}, {human.n} runs)"
        if top is not None and human is not None:
            line.same_environments = env_sets.get(_allocation_key(top)) == env_sets.get(_allocation_key(human))
            if human.point > 0:
                line.ratio = top.point / human.point
        out.append(line)
    return out


def _outlier_note(runs: list[RunRecord], settings: ReportSettings) -> str | None:
    high: dict[str, int] = defaultdict(int)
    for run in runs:
        if run.score > PLAUSIBLE_MAX:
            high[run.agent] += 1
    if not high or (settings.exclude_above is not None and settings.exclude_above <= PLAUSIBLE_MAX):
        return None
    counts = ", ".join(f"{agent} {n}" for agent, n in sorted(high.items()))
    return (
        f"{sum(high.values())} runs score above 2 ({counts}) and are counted; the paper never saw normalized "
        "scores above 2 after zeroing runs it judged to be cheating, which METR's export does not always do. "
        "The per-agent table shows the headline without them; --exclude-above 2 leaves them out"
    )


def build_report(data: ReportData, settings: ReportSettings, info: EnvironmentInfo | None = None) -> Report:
    """All numbers of one report from the loaded runs; pure apart from reading environment metadata."""
    if settings.estimator not in ESTIMATORS:
        raise RebenchError(f"unknown estimator {settings.estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    builder = _Builder(settings, info or default_info())
    loaded = _unique(data.runs + data.humans)
    notes = list(data.notes)
    if settings.exclude_above is not None:
        limit = settings.exclude_above
        left_out = [r for r in loaded if r.score > limit]
        data = ReportData(
            runs=[r for r in data.runs if r.score <= limit],
            humans=[r for r in data.humans if r.score <= limit],
            notes=data.notes,
        )
        counts: dict[str, int] = defaultdict(int)
        for run in left_out:
            counts[run.agent] += 1
        detail = ", ".join(f"{agent} {n}" for agent, n in sorted(counts.items())) or "none"
        notes.append(f"--exclude-above {limit:g} left out {len(left_out)} runs ({detail})")
    # humans' 8 h attempts are the yardstick (`data.humans`, whatever the filters); own human attempts of
    # other lengths are grouped like an agent's, still as `human`
    agent_runs = [r for r in data.runs if r.agent != HUMAN_AGENT or r.budget_s != HUMAN_ATTEMPT_S]
    groups = _groups(agent_runs)
    human_groups = _groups(data.humans)
    all_groups = {**groups, **human_groups}
    totals = settings.total_budgets_s
    rows: list[ScoreRow] = []
    curves: list[ScoreRow] = []
    for key in sorted(all_groups):
        runs = all_groups[key]
        rows.extend(builder.group(key, runs, totals))
        cap = max(CURVE_MAX_TOTAL_S, *totals)
        curve_totals = sorted({k * key[2] for k in CURVE_KS if k * key[2] <= cap} | {t for t in totals if t < key[2]})
        curves.extend(builder.group(key, runs, curve_totals))
    beyond = sum(1 for row in rows if beyond_data(row))
    if beyond and settings.strict:
        rows = [row for row in rows if not beyond_data(row)]
        curves = [row for row in curves if not beyond_data(row)]
        notes.append(f"--strict left out {beyond} estimate(s) whose k is above the runs behind them")
    elif beyond:
        fewest = min(row.min_n for row in rows if beyond_data(row))
        notes.append(f"† {beyond} estimate(s) have k above the runs behind them (as few as {fewest}): each is only "
                     "the best of those runs (the n column; `--strict` leaves them out)")
    notes += _mark_best(rows)
    _mark_best(curves)  # comparability needs the per-environment rows; the plot keeps the averages
    curves = [r for r in curves if r.environment == ALL]
    run_ids = {r.attempt_id for r in data.runs}
    outliers = _outlier_note(loaded, settings)
    if outliers:
        notes.append(outliers)
    human_attempts = _human_attempts(loaded)
    corrected = sum(1 for h in human_attempts if h.corrections)
    if corrected:
        notes.append(f"{corrected} own human attempt(s) have pause corrections (`rebench human adjust`): their "
                     "score over time is placed on corrected working time; both times are in the human attempts table")
    own_profiles = sorted({r.profile for r in data.runs if r.source == "own" and r.profile != "paper"})
    if own_profiles and any(r.source == "imported" for r in data.runs + data.humans):
        notes.append(
            f"own attempts ran the {', '.join(own_profiles)} profile(s) while imported METR runs used the "
            "paper's setup; comparisons across the two are indicative only"
        )
    return Report(
        settings=settings,
        rows=rows,
        curves=curves,
        standings=_standings(rows, data.humans),
        summary=_summaries(data.runs + [h for h in data.humans if h.attempt_id not in run_ids]),
        humans=_human_summary(data.humans),
        data=data,
        notes=notes,
        agents=_agent_summaries(builder, loaded, rows, settings.compare_at_s),
        headline=_headline(rows, data.humans, settings),
        human_attempts=human_attempts,
    )


def _human_attempts(runs: Iterable[RunRecord]) -> list[HumanAttemptRow]:
    return [
        HumanAttemptRow(attempt_id=r.attempt_id, environment=r.environment, expert=r.human.expert,
                        budget_s=r.budget_s, score=r.score, working_s=r.human.working_s,
                        corrected_working_s=r.human.corrected_working_s, corrections=r.human.corrections)
        for r in sorted(runs, key=lambda r: r.attempt_id) if r.human is not None
    ]
