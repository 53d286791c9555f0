"""`rebench import metr-runs PATH`: METR's run-level export as imported attempts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json
from rebench.report.importer import import_metr_runs

app = typer.Typer(help="Import results produced elsewhere.", no_args_is_help=True, add_completion=False)


@app.command("metr-runs")
def metr_runs_command(
    path: Annotated[Path, typer.Argument(help="METR's run-level export (JSON Lines), e.g. all_runs.jsonl.")],
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Import the RE-Bench rows (task families ai_rd_*) of METR's export; re-importing adds nothing."""
    store = open_store(db)
    try:
        summary = import_metr_runs(store, path)
    finally:
        store.close()
    if json_output:
        print_json(summary.model_dump())
        return
    console.print(
        f"imported {summary.added} RE-Bench runs from {summary.path} (sha256 {summary.sha256[:12]}); "
        f"{summary.already_present} were already imported, "
        f"{summary.skipped_other_suites} rows of other suites skipped"
    )
