"""Score@k rows: per agent, source and per-attempt budget, the best allocation of each total budget
(rebench.report.allocation), bootstrapped (rebench.report.bootstrap); then which rows compare and which are best, with
the gateway's metered usage summed per row.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from rebench.budget import format_duration
from rebench.gateway.usage import MeterUsage
from rebench.report import heldout
from rebench.report.allocation import Allocation, allocation_for
from rebench.report.bootstrap import (
    EnvironmentScores,
    bootstrap_score_at_k,
)
from rebench.report.data import RunRecord
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.rows import ALL, PLAUSIBLE_MAX, ReportSettings, ScoreRow

_T = TypeVar("_T")
GroupKey = tuple[str, str, float]  # agent, source, per-attempt budget


def group_runs(runs: Iterable[RunRecord]) -> dict[GroupKey, list[RunRecord]]:
    groups: dict[GroupKey, list[RunRecord]] = defaultdict(list)
    for run in runs:
        groups[(run.agent, run.source, run.budget_s)].append(run)
    return dict(groups)


def by_environment(values: Iterable[tuple[str, _T]]) -> dict[str, list[_T]]:
    out: dict[str, list[_T]] = defaultdict(list)
    for env, value in values:
        out[env].append(value)
    return dict(out)


def kinds_by_environment(values: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for env, kind in values:
        out[env].add(kind)
    return dict(out)


class RowBuilder:
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
        held = [heldout.summary_fields([run for _, run in scored[env]]) for env in result.environments]
        heldouts = [fields.get("heldout_mean") for fields in held]
        heldout_kinds = [fields.get("heldout_anchors") or "" for fields in held]
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
                        heldout_anchors=None if alloc.truncated else heldout_kinds[i] or None,
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
                    heldout_mean=(None if alloc.truncated or None in heldouts
                                  else float(np.mean(heldouts))),  # type: ignore[arg-type]
                    heldout_anchors=(None if alloc.truncated or None in heldouts
                                     else ",".join(sorted(set(",".join(heldout_kinds).split(",")) - {""}))),
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
            for env, kinds in kinds_by_environment((r.environment, r.anchors) for r in runs).items()
        }
        for total in sorted({budget_s, *totals}):  # an attempt's own length is always an allocation
            alloc = allocation_for(total, budget_s)
            if alloc is None:
                continue
            (cut if alloc.truncated else whole).append(alloc)
        rows = self.rows(key, by_environment((r.environment, (r.score, r)) for r in runs), whole, anchors)
        for alloc in cut:
            logged = ((r, r.score_at(alloc.total_s)) for r in runs)
            scored = by_environment((r.environment, (value, r)) for r, value in logged if value is not None)
            rows.extend(self.rows(key, scored, [alloc], anchors))
        return rows


AllocationKey = tuple[str, str, float, int, float, bool]


def allocation_key(row: ScoreRow) -> AllocationKey:
    return (row.agent, row.source, row.budget_s, row.k, row.total_s, row.truncated)


def environment_sets(rows: Iterable[ScoreRow]) -> dict[AllocationKey, frozenset[str]]:
    """The environments behind each allocation's `all` row (from its per-environment rows)."""
    out: dict[AllocationKey, set[str]] = defaultdict(set)
    for row in rows:
        if row.environment != ALL:
            out[allocation_key(row)].add(row.environment)
    return {key: frozenset(envs) for key, envs in out.items()}


def mark_best(rows: list[ScoreRow]) -> list[str]:
    """Per agent, source, environment and total budget, mark the allocation with the highest estimate.

    `all` rows average over the environments an allocation has runs for, so only allocations
    covering every environment any allocation of the agent covers at that total compete; the
    others are marked not comparable. Returns a note for each total where none covers them all.
    """
    env_sets = environment_sets(rows)
    groups: dict[tuple[str, str, str, float], list[ScoreRow]] = defaultdict(list)
    for row in rows:
        groups[(row.agent, row.source, row.environment, row.total_s)].append(row)
    notes = []
    for (agent, source, environment, total_s), members in groups.items():
        if environment == ALL:
            sets = {id(row): env_sets.get(allocation_key(row), frozenset()) for row in members}
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
