"""Building the report: score@k rows per allocation, best allocations, standing among experts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from rebench.errors import RebenchError
from rebench.report.allocation import CURVE_KS, Allocation, allocation_for
from rebench.report.bootstrap import (
    DEFAULT_N_BOOTSTRAP,
    DEFAULT_SEED,
    EnvironmentScores,
    bootstrap_score_at_k,
)
from rebench.report.data import HUMAN_AGENT, ReportData, RunRecord
from rebench.report.estimators import ESTIMATORS, EstimatorName
from rebench.report.known_environments import EnvironmentInfo, default_info
from rebench.report.percentiles import human_percentile_curve, locate_on_curve

ALL = "all"
CURVE_MAX_TOTAL_S = 64 * 3600.0  # the plot's x range: the paper's budgets up to Claude's 30min@128


class ReportSettings(BaseModel):
    """How the numbers were computed; printed with every report."""

    estimator: EstimatorName = "expected_max"
    n_bootstrap: int = Field(DEFAULT_N_BOOTSTRAP, ge=1)
    seed: int = DEFAULT_SEED
    total_budgets_s: tuple[float, ...]
    compare_at_s: float = 28800.0


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
    human_percentile: float | None = Field(
        None, description="for an agent's best `all` row: the human 8 h percentile it matches"
    )


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
    mean: float
    best: float
    anchors: str = Field(description="kinds of anchors behind the normalized scores: declared, calibrated, imported")


class HumanSummary(BaseModel):
    """Our human 8 h attempts in the shape of the paper's printed figures."""

    runs: int
    mean: float
    fraction_nonzero: float
    fraction_at_or_above_reference: float
    per_environment: dict[str, tuple[int, float]]  # environment -> (runs, best)


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


GroupKey = tuple[str, str, float]  # agent, source, per-attempt budget


def _groups(runs: Iterable[RunRecord]) -> dict[GroupKey, list[RunRecord]]:
    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(run.agent, run.source, run.budget_s)].append(run)
    return dict(groups)


def _by_env(values: Iterable[tuple[str, float]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
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
        scores: dict[str, list[float]],
        allocations: Sequence[Allocation],
        anchors: dict[str, str],
    ) -> list[ScoreRow]:
        """Per-environment and `all` rows for allocations that share one set of scores."""
        agent, source, _ = key
        if not scores or not allocations:
            return []
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
        rows = self.rows(key, _by_env((r.environment, r.score) for r in runs), whole, anchors)
        for alloc in cut:
            logged = ((r.environment, r.score_at(alloc.total_s)) for r in runs)
            scores = _by_env((env, value) for env, value in logged if value is not None)
            rows.extend(self.rows(key, scores, [alloc], anchors))
        return rows


def _mark_best(rows: list[ScoreRow]) -> None:
    """Per agent, source, environment and total budget, mark the allocation with the highest estimate."""
    best: dict[tuple[str, str, str, float], ScoreRow] = {}
    for row in rows:
        key = (row.agent, row.source, row.environment, row.total_s)
        if key not in best or row.point > best[key].point:
            best[key] = row
    for row in best.values():
        row.best_allocation = True


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
            mean=float(np.mean([r.score for r in members])),
            best=max(r.score for r in members),
            anchors=",".join(sorted({r.anchors for r in members})),
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


def _allocation_key(row: ScoreRow) -> tuple[str, str, float, int, float, bool]:
    return (row.agent, row.source, row.budget_s, row.k, row.total_s, row.truncated)


def _standings(rows: list[ScoreRow], humans: list[RunRecord]) -> list[Standing]:
    """Locate each agent's best `all` row among the human 8 h scores of the same environments."""
    human_scores = _by_env((h.environment, h.score) for h in humans)
    envs_of: dict[tuple[str, str, float, int, float, bool], set[str]] = defaultdict(set)
    for row in rows:
        if row.environment != ALL:
            envs_of[_allocation_key(row)].add(row.environment)
    out = []
    for row in rows:
        if row.environment != ALL or not row.best_allocation or row.agent == HUMAN_AGENT:
            continue
        envs = envs_of[_allocation_key(row)]
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


def build_report(data: ReportData, settings: ReportSettings, info: EnvironmentInfo | None = None) -> Report:
    """All numbers of one report from the loaded runs; pure apart from reading environment metadata."""
    if settings.estimator not in ESTIMATORS:
        raise RebenchError(f"unknown estimator {settings.estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    builder = _Builder(settings, info or default_info())
    agent_runs = [r for r in data.runs if r.agent != HUMAN_AGENT]
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
        curves.extend(r for r in builder.group(key, runs, curve_totals) if r.environment == ALL)
    _mark_best(rows)
    run_ids = {r.attempt_id for r in data.runs}
    notes = list(data.notes)
    high = sum(1 for r in data.runs + data.humans if r.source == "imported" and r.score > 2.0)
    if high:
        notes.append(
            f"{high} imported runs score above 2; the paper never saw normalized scores above 2 and "
            "zeroed runs it judged to be cheating, which METR's export does not always do"
        )
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
    )
