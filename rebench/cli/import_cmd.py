"""`rebench import metr-runs PATH`: METR's run-level export as imported attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, print_json

app = typer.Typer(help="Import results produced elsewhere.", no_args_is_help=True, add_completion=False)


@app.command("metr-runs")
def metr_runs_command(
    path: Annotated[Path, typer.Argument(help="METR's run-level export (JSON Lines), e.g. all_runs.jsonl.")],
    allow_empty: Annotated[
        bool, typer.Option("--allow-empty", help="Accept a file without RE-Bench rows (imports nothing).")
    ] = False,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Import the RE-Bench rows (task families ai_rd_*) of METR's export; runs already imported (by run id) are skipped."""
    from rebench.api import import_metr_runs

    summary = import_metr_runs(path, db=db, allow_empty=allow_empty)  # a bad file writes nothing
    if json_output:
        print_json(summary.model_dump())
        return
    console.print(
        f"imported {summary.added} RE-Bench runs from {summary.path} (sha256 {summary.sha256[:12]}); "
        f"{summary.already_present} were already imported (same run id), "
        f"{summary.skipped_other_suites} rows of other suites skipped; "
        f"{summary.clipped_negative} negative scores clipped to 0 (the paper's rule)",
        soft_wrap=True,
        highlight=False,
        markup=False,
    )
