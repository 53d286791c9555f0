"""Held-out finals and probing in reports (a profile's `final_split`, rebench.scoring.heldout).

Per attempt: its held-out final, normalized with the split's own anchors (calibrated here when
`envs calibrate` measured them, else declared); its best intermediate
score, normalized with the anchors in force; the gap between them (best intermediate minus
held-out: positive where the solution did better on the split the agent could probe); score
calls per working hour; and the probing flag, set when the gap is above the split's `margin`.
Per agent: the mean gap with a percentile bootstrap interval over its attempts, and how many
were flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rebench.scoring.heldout import HeldoutSolution, split_anchors
from rebench.scoring.normalize import normalize

if TYPE_CHECKING:
    from rebench.calibration import ResolvedAnchors
    from rebench.environments.metadata import Profile
    from rebench.store import Attempt, ScoreEvent, Store

class HeldoutRun(Protocol):
    """The fields of a report run (rebench.report.data.RunRecord) that these summaries read."""

    @property
    def heldout_score(self) -> float | None: ...

    @property
    def best_intermediate(self) -> float | None: ...

    @property
    def probing(self) -> bool: ...

    @property
    def calls_per_hour(self) -> float | None: ...

    @property
    def heldout_anchors(self) -> str | None: ...


GAP_NOTE = ("final on held-out: the solution behind an attempt's final score (under `best`, its best score call's; "
            "else the one it ended with), scored after it on a hidden split no score "
            "call used (profiles with `final_split`); gap = best intermediate score minus held-out final, both "
            "normalized, with a 95% bootstrap interval per agent; `probing` counts attempts whose gap is above the "
            "split's margin: their solution did better on the data they could score against than on fresh data")


def heldout_fields(attempt: Attempt, events: Sequence[ScoreEvent],
                   spec: tuple[Profile, ResolvedAnchors] | None) -> dict[str, Any]:
    """The RunRecord fields of one own attempt (module docstring); empty for imported ones."""
    if attempt.source != "own":
        return {}
    intermediate = [e for e in events if e.kind == "intermediate"]
    hours = float(attempt.working_s or 0.0) / 3600
    out: dict[str, Any] = {"calls_per_hour": len(intermediate) / hours if hours > 0 else None}
    split = spec[0].final_split if spec is not None else None
    if spec is None or split is None:
        return out
    profile, anchors = spec
    heldout = [e for e in events if e.kind == "heldout"]
    if not heldout:
        return out
    valid = [float(e.raw) for e in intermediate if e.valid and e.raw is not None]
    best_raw = (min(valid) if profile.direction == "lower" else max(valid)) if valid else None
    best = normalize(best_raw, anchors.start, anchors.reference)
    scale = split_anchors(anchors, split)
    final = normalize(heldout[-1].raw if heldout[-1].valid else None, scale.start, scale.reference)
    out.update(heldout_score=final, best_intermediate=best, probing=best - final > split.margin,
               heldout_anchors=scale.kind)
    return out


def summary_fields(members: Sequence[HeldoutRun]) -> dict[str, Any]:
    """AttemptSummary's held-out columns over a group of attempts (None where none has one)."""
    scored = [r for r in members if r.heldout_score is not None]
    if not scored:
        return {}
    import numpy as np  # lazy: `rebench attempts show` reads this module's fields without NumPy (0.2 s)

    return {"heldout_mean": float(np.mean([r.heldout_score for r in scored])), "heldout_n": len(scored),
            "heldout_anchors": ",".join(sorted({r.heldout_anchors for r in scored if r.heldout_anchors}))}


def agent_fields(runs: Sequence[HeldoutRun], n_bootstrap: int, seed: int) -> dict[str, Any]:
    """AgentSummary's mean gap with its bootstrap interval, probing count and score calls per hour."""
    import numpy as np  # lazy, as in summary_fields

    out: dict[str, Any] = {}
    rates = [r.calls_per_hour for r in runs if r.calls_per_hour is not None]
    if rates:
        out["calls_per_hour"] = float(np.mean(rates))
    gaps = np.asarray([r.best_intermediate - r.heldout_score for r in runs
                       if r.heldout_score is not None and r.best_intermediate is not None])
    if not len(gaps):
        return out
    rng = np.random.default_rng(seed)
    means = gaps[rng.integers(0, len(gaps), size=(max(1, n_bootstrap), len(gaps)))].mean(axis=1)
    out.update(heldout_gap=float(gaps.mean()), heldout_gap_low=float(np.percentile(means, 2.5)),
               heldout_gap_high=float(np.percentile(means, 97.5)), heldout_n=len(gaps),
               probing=sum(bool(r.probing) for r in runs))
    return out


def notes(runs: Sequence[HeldoutRun]) -> list[str]:
    return [GAP_NOTE] if any(r.heldout_score is not None for r in runs) else []


def attempt_detail(store: Store, attempt: Attempt, events: Sequence[ScoreEvent],
                   specs: dict[tuple[str, str], Any] | None = None) -> dict[str, Any]:
    """`attempts show` (and the analysis frame): score calls per working hour, and where there is a
    held-out final, it beside the best intermediate score with the gap and the probing flag
    (normalized). `specs` caches each (environment, profile)'s profile and anchors across calls."""
    from rebench.calibration import resolve_anchors
    from rebench.report.known_environments import default_info

    specs = {} if specs is None else specs
    key = (attempt.environment, attempt.profile)
    if key not in specs:
        env = default_info().folder(attempt.environment)
        specs[key] = ((env.profile(attempt.profile), resolve_anchors(store, env, attempt.profile))
                      if env is not None and attempt.profile in env.metadata.profiles else None)
    fields = heldout_fields(attempt, events, specs[key])
    if fields.get("heldout_score") is not None:
        fields["gap"] = fields["best_intermediate"] - fields["heldout_score"]
        solution = scored_solution([e for e in events if e.kind == "heldout"][-1])
        fields.update(heldout_solution=solution.solution, heldout_fallback=solution.fallback,
                      heldout_solution_line=solution.describe())
    return fields


def scored_solution(row: ScoreEvent) -> HeldoutSolution:
    """The solution a held-out row scored, from its details; a row written before they named it
    scored the final solution (the only one kept then)."""
    details = row.details or {}
    if details.get("solution") not in ("best_call", "final"):
        return HeldoutSolution(solution="final")
    return HeldoutSolution.model_validate({k: details.get(k) for k in HeldoutSolution.model_fields})


def attempt_line(detail: dict[str, Any]) -> str | None:
    rate = detail.get("calls_per_hour")
    calls = f"score calls per working hour: {rate:.1f}" if rate is not None else None
    if detail.get("heldout_score") is None:
        return calls
    flag = " (flagged: probing)" if detail.get("probing") else ""
    return (f"held-out final {detail['heldout_score']:.3f} vs best intermediate {detail['best_intermediate']:.3f}: "
            f"gap {detail['gap']:.3f}{flag}" + (f"; {calls}" if calls else "") + f"\n{detail['heldout_solution_line']}")
