"""One call from options to a finished report, shared by rebench.api.report and the benchmark script."""

from __future__ import annotations

from collections.abc import Sequence

from rebench.budget import parse_duration
from rebench.errors import RebenchError
from rebench.report.allocation import parse_total_budgets
from rebench.report.compute import build_report
from rebench.report.data import Filters, load_report_data
from rebench.report.estimators import ESTIMATORS, EstimatorName
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.rows import Report, ReportSettings
from rebench.store import Store


def settings_from_options(
    estimator: str = "expected_max",
    n_bootstrap: int = 1000,
    seed: int = 0,
    budgets: str | Sequence[str] | None = None,
    at: str = "8h",
    exclude_above: float | None = None,
    strict: bool = False,
) -> ReportSettings:
    """Validate user-typed options; each bad value is a one-line RebenchError."""
    if estimator not in ESTIMATORS:
        raise RebenchError(f"unknown estimator {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    if n_bootstrap < 1:
        raise RebenchError(f"invalid --n-bootstrap {n_bootstrap}: must be 1 or more")
    if exclude_above is not None and not exclude_above >= 0:  # also rejects nan
        raise RebenchError(f"invalid --exclude-above {exclude_above}: must be a normalized score, 0 or more")
    compare_at = float(parse_duration(at))
    totals = tuple(sorted(set(parse_total_budgets(budgets)) | {compare_at}))
    chosen: EstimatorName = "sampled_max" if estimator == "sampled_max" else "expected_max"
    return ReportSettings(
        estimator=chosen,
        n_bootstrap=n_bootstrap,
        seed=seed,
        total_budgets_s=totals,
        compare_at_s=compare_at,
        exclude_above=exclude_above,
        strict=strict,
    )


def make_report(
    store: Store, filters: Filters, settings: ReportSettings, info: EnvironmentInfo | None = None,
    rescored: int | None = None,
) -> Report | None:
    """The report for the attempts matching `filters`, or None when nothing matches; with `rescored`,
    the attempts that rescore run re-scored, counted by their re-scores (rebench.report.rescored)."""
    data = load_report_data(store, filters, info)
    if rescored is not None:
        from rebench.report.rescored import use_rescores

        data = use_rescores(store, data, rescored)
    if not data.runs and (not data.humans or filters.campaigns or filters.agents):
        return None  # asked about agents or campaigns that have no attempts: humans alone answer nothing
    return build_report(data, settings, info)
