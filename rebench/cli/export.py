"""`rebench export inspect` and `rebench export atif`: attempts as Inspect AI eval logs, or as ATIF trajectories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json

app = typer.Typer(help="Write attempts in other tools' formats.", no_args_is_help=True, add_completion=False)


@app.command("inspect")
def inspect_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the .eval files (made if missing).")],
    campaign: Annotated[list[int] | None, typer.Option("--campaign", help="Only this campaign (repeatable).")] = None,
    attempt: Annotated[list[int] | None, typer.Option("--attempt", help="Only this attempt (repeatable).")] = None,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """One Inspect eval log per (campaign, environment, agent), one sample per attempt (needs the `inspect` extra)."""
    from rebench.export import require_inspect

    require_inspect("rebench export inspect")  # before the database is opened: nothing is made without it
    from rebench.export.inspect_log import export_inspect

    store = open_store(db, read_only=True)
    try:
        summary = export_inspect(store, out, campaigns=campaign or (), attempts=attempt or ())
    finally:
        store.close()
    if json_output:
        print_json(summary.model_dump())
        return
    for log in summary.logs:
        console.print(f"{log.path}: {len(log.attempts)} attempt(s) of {log.agent} on {log.environment}",
                      highlight=False, markup=False, soft_wrap=True)
    console.print(f"{len(summary.logs)} log(s) in {summary.out}; view them with `rebench view` or "
                  f"`inspect view --log-dir {summary.out}`", highlight=False, markup=False, soft_wrap=True)


@app.command("atif")
def atif_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the trajectories: one folder per attempt, each with its trajectory.json (made if missing).")],
    campaign: Annotated[list[int] | None, typer.Option("--campaign", help="Only this campaign (repeatable).")] = None,
    attempt: Annotated[list[int] | None, typer.Option("--attempt", help="Only this attempt (repeatable).")] = None,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """One ATIF trajectory (Harbor's Agent Trajectory Interchange Format) per attempt (docs/exports.md)."""
    from rebench.export.atif import export_atif

    store = open_store(db, read_only=True)
    try:
        summary = export_atif(store, out, campaigns=campaign or (), attempts=attempt or ())
    finally:
        store.close()
    if json_output:
        print_json(summary.model_dump())
        return
    for written in summary.trajectories:
        console.print(f"{written.path}: attempt {written.attempt}, {written.steps} step(s)", highlight=False,
                      markup=False, soft_wrap=True)
    console.print(f"{len(summary.trajectories)} trajectory file(s) in {summary.out}", highlight=False, markup=False,
                  soft_wrap=True)
