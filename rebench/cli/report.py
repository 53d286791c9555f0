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
from rebench.report.render import report_json, score_rows_csv, write_outputs
from rebench.report.terminal import print_terminal
from rebench.report.tree import SolutionTree, load_tree

FORMATS = ("table", "csv", "parquet")


def report_command(
    db: DbOption = None,
    json_output: JsonOption = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write report.md, score_at_k.csv, report.html and the plots (PNG) here; "
                     "with --format csv or parquet, the score@k rows to this file (or into this folder)."),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="table (the default: tables here, files with --out), or the score@k rows "
                     "as csv (on stdout without --out) or parquet (needs --out and pyarrow)."),
    ] = "table",
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
    strict: Annotated[bool, typer.Option("--strict", help="Leave out estimates whose k is above the runs behind "
                                         "them (without it they are marked †: only the best of the n runs).")] = False,
    rescored: Annotated[
        int | None,
        typer.Option("--rescored", help="Count the re-scores of this `rebench rescore` run instead of the original "
                     "scores (shown beside them), over the attempts it re-scored."),
    ] = None,
    by_env: Annotated[bool, typer.Option("--by-env", help="Also print the per-environment rows.")] = False,
    tree: Annotated[
        list[int] | None,
        typer.Option("--tree", help="Also draw this attempt's solution tree (aide agent) in report.html; "
                     "repeatable; needs --out."),
    ] = None,
) -> None:
    """Score@k per agent and total time budget, with bootstrap intervals and human comparison."""
    if fmt not in FORMATS:
        raise RebenchError(f"invalid --format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt != "table":
        from rebench.analysis import check_format

        check_format(fmt)  # parquet without pyarrow fails here, before the report is computed
        if json_output:
            raise RebenchError(f"--json and --format {fmt} are two outputs for the same rows: pick one")
        if fmt == "parquet" and out is None:
            raise RebenchError("--format parquet writes a binary file: give --out FILE")
    if tree and out is None:
        raise RebenchError("--tree draws the attempt's solution tree into report.html: give --out DIR")
    trees = _trees(db, tree or [])
    _check_filters(db, campaign or [], env or [], agent or [])
    from rebench.api import report as make_report

    report = make_report(db, campaigns=campaign or (), environments=env or (), agents=agent or (), source=source,
                         estimator=estimator, n_bootstrap=n_bootstrap, seed=seed, budgets=budgets, at=at,
                         exclude_above=exclude_above, strict=strict, rescored=rescored)
    if fmt != "table":
        if out is None:
            typer.echo(score_rows_csv(report), nl=False)
            return
        from rebench.analysis import write_score_rows

        console.print(f"wrote {write_score_rows(report, out, fmt)}", highlight=False, soft_wrap=True)
        return
    if report is None:
        if json_output:
            print_json([])
            return
        raise RebenchError(
            "no finished attempts match these filters; run `rebench run ...` or `rebench import metr-runs FILE` first"
        )
    if out is not None:
        from rebench.report.story import load_stories

        stories = load_stories(open_store(db, read_only=True), report.data.runs)
        written = write_outputs(report, out, trees=trees, stories=stories)
    if json_output:
        print_json(report_json(report))
    else:
        print_terminal(report, console, by_env=by_env)
        if out is not None:
            plots = [p for p in written if p.parent.name == "attempts"]
            shown = [str(p) for p in written if p not in plots]
            if plots:
                shown.append(f"{len(plots)} attempt plot(s) in {plots[0].parent}")
            console.print("wrote " + ", ".join(shown), highlight=False, soft_wrap=True)


def _check_filters(db: Path | None, campaigns: list[int], environments: list[str], agents: list[str]) -> None:
    from rebench.report.data import Filters, unmatched_filter

    if campaigns or environments or agents:
        problem = unmatched_filter(open_store(db, read_only=True), Filters(campaigns, environments, agents))
        if problem:
            raise RebenchError(problem)


def _trees(db: Path | None, attempt_ids: list[int]) -> list[SolutionTree]:
    """The solution trees asked for with --tree, read before the report is computed (a bad id fails first)."""
    if not attempt_ids:
        return []
    store = open_store(db, read_only=True)
    with store.session() as session:
        return [load_tree(session, attempt_id) for attempt_id in attempt_ids]
