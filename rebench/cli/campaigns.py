"""`rebench campaigns list|show`: campaigns and how far each is, from the store alone (so a
campaign running in another terminal, or on another host of the same database, shows too)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json
from rebench.tables import Col, print_table

if TYPE_CHECKING:
    pass

app = typer.Typer(help="Campaigns: list them, show one's progress (also one running elsewhere).",
                  no_args_is_help=True, add_completion=False)

@app.command("list")
def list_command(db: DbOption = None, json_output: JsonOption = False,
                 limit: Annotated[int, typer.Option("--limit", min=1, help="Newest N campaigns.")] = 20) -> None:
    """Campaigns, newest first: state, agents, environments, attempts done/running/queued."""
    from rebench.scheduler.progress import all_campaigns

    found = all_campaigns(open_store(db, read_only=True), limit)
    if json_output:
        print_json([p.model_dump(mode="json") for p in found])
        return
    columns = [Col("id", key=True), Col("state", key=True), Col("created"), Col("agents"), Col("environments"),
               Col("done", justify="right"), Col("error", justify="right"), Col("interrupted", justify="right"),
               Col("running", justify="right"), Col("queued", justify="right")]
    rows = [[str(p.campaign_id), p.state_text, p.created_at.strftime("%Y-%m-%d %H:%M"),
             ",".join(sorted({g.agent for g in p.groups})), ",".join(sorted({g.environment for g in p.groups})),
             f"{p.done}/{p.planned}", str(p.error), str(p.interrupted), str(p.running), str(p.queued)]
            for p in found]
    print_table(console, "Campaigns", columns, rows, more="--json",
                drop_first=("created", "environments", "agents"))


@app.command("show")
def show_command(campaign_id: int, db: DbOption = None, json_output: JsonOption = False,
                 watch: Annotated[bool, typer.Option("--watch", help="Refresh every 2 s until the campaign ends.")]
                 = False) -> None:
    """One campaign's progress per environment and agent, with an ETA while it runs."""
    from rich.live import Live

    from rebench.scheduler.progress import campaign_progress
    from rebench.scheduler.view import render

    store = open_store(db, read_only=True)
    progress = campaign_progress(store, campaign_id)
    if json_output:
        print_json({**progress.model_dump(mode="json"), "planned": progress.planned, "done": progress.done,
                    "error": progress.error, "interrupted": progress.interrupted})
        return
    if not watch:
        console.print(render(progress))
        return
    with Live(render(progress), console=console, auto_refresh=False) as live:
        while progress.state == "running":
            time.sleep(2.0)
            progress = campaign_progress(store, campaign_id)
            live.update(render(progress), refresh=True)
