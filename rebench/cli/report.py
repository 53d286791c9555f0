"""`rebench report`: score@k by total time budget, against human experts, as tables, JSON and files.

Also the per-attempt summary (environment x agent x per-attempt budget with n, mean
and best normalized score, and which anchors normalized them). Own attempts are
normalized from their raw score with the anchors in force (see rebench.calibration).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json
from rebench.errors import RebenchError
from rebench.report.bootstrap import DEFAULT_N_BOOTSTRAP, DEFAULT_SEED
from rebench.report.data import Filters
from rebench.report.render import print_terminal, report_json, write_outputs
from rebench.report.service import make_report, settings_from_options


def report_command(
    db: DbOption = None,
    json_output: JsonOption = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write report.md, score_at_k.csv, report.html and the plots (PNG) here."),
    ] = None,
    campaign: Annotated[list[int] | None, typer.Option("--campaign", help="Only these campaign ids.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="Only these environments.")] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option("--agent", help="Only these agents (humans always stay as the yardstick)."),
    ] = None,
    source: Annotated[str | None, typer.Option("--source", help="own or imported.")] = None,
    estimator: Annotated[
        str,
        typer.Option("--estimator", help="expected_max (METR's code) or sampled_max (the paper's wording)."),
    ] = "expected_max",
    n_bootstrap: Annotated[int, typer.Option("--n-bootstrap", help="Bootstrap resamples.")] = DEFAULT_N_BOOTSTRAP,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap.")] = DEFAULT_SEED,
    budgets: Annotated[
        str, typer.Option("--budgets", help="Total budgets per environment, comma-separated.")
    ] = "30m,2h,8h,16h,32h",
    at: Annotated[
        str, typer.Option("--at", help="Total budget of the per-environment plot and the per-agent table.")
    ] = "8h",
    exclude_above: Annotated[
        float | None,
        typer.Option(
            "--exclude-above",
            help="Leave out runs with a normalized score above this (e.g. 2). Default: keep all, as METR did.",
        ),
    ] = None,
    by_env: Annotated[bool, typer.Option("--by-env", help="Also print the per-environment rows.")] = False,
) -> None:
    """Score@k per agent and total time budget, with bootstrap intervals and human comparison."""
    filters = Filters(campaigns=campaign or (), environments=env or (), agents=agent or (), source=source)
    settings = settings_from_options(estimator, n_bootstrap, seed, budgets, at, exclude_above)
    store = open_store(db)
    try:
        report = make_report(store, filters, settings)
    finally:
        store.close()
    if report is None:
        if json_output:
            print_json([])
            return
        raise RebenchError(
            "no finished attempts match these filters; run `rebench run ...` or `rebench import metr-runs FILE` first"
        )
    if out is not None:
        written = write_outputs(report, out)
    if json_output:
        print_json(report_json(report))
    else:
        print_terminal(report, console, by_env=by_env)
        if out is not None:
            console.print("wrote " + ", ".join(str(p) for p in written))
