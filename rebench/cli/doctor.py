"""`rebench doctor`: what this machine can run, as a table for a person or JSON for a script."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, labelled, print_json
from rebench.literal import literal_text

if TYPE_CHECKING:
    from rebench.doctor import DoctorReport

STYLES = {"ok": "green", "missing": "bold red", "warning": "yellow", "info": "dim"}

def _names(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def doctor_command(
    backend: Annotated[str | None, typer.Option("--backend", help="Check what this backend needs (local or docker); exit 1 when something is missing.")] = None,
    env: Annotated[str | None, typer.Option("--env", "-e", help="Environment name(s), comma-separated: check what their profile needs here.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="The environments' profile.")] = "tiny",
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Agent name(s), comma-separated: check their model's key and SDK and their backend.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="provider/model the agents would use.")] = None,
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="A Ray head to knock on (host:port).")] = None,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Say what this machine can run: Python, Docker, GPUs, SSH, Ray, model keys, the database."""
    from rebench.doctor import diagnose

    report = diagnose(backend=backend, environments=_names(env), profile=profile, agents=_names(agent), model=model,
                      ray_address=ray_address, db=db)
    if json_output:
        print_json({**report.model_dump(mode="json"), "ok": report.ok,
                    "failing": [check.model_dump(mode="json") for check in report.failing]})
    else:
        _print_table(report)
        for check in report.checks:  # one line each, never cut: the table may wrap or drop what is found
            if check.fix and check.failing:
                console.print(labelled("missing", f"{check.label} (needed by "
                                                  f"{', '.join(check.needed_by)}): {check.fix}", "bold red"), soft_wrap=True)
            elif check.fix:
                console.print(labelled("note", f"{check.label} ({check.status.value}): {check.fix}"),
                              soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)



def _print_table(report: DoctorReport) -> None:
    """Every row, whatever the width: what was found folds (a path is one long word), never left out."""
    from rich.table import Table

    table = Table(title=f"rebench doctor (backend {report.backend}, profile {report.profile})")
    for header in ("check", "status"):
        table.add_column(header, no_wrap=True)
    table.add_column("found", overflow="fold")
    for check in report.checks:
        table.add_row(literal_text(check.label), literal_text(check.status.value, STYLES[check.status.value]),
                      literal_text(check.found))
    console.print(table)
