"""`rebench campaigns list|show`: campaigns and how far each is, from the store alone (so a
campaign running in another terminal, or on another host of the same database, shows too)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from rebench.budget import format_duration
from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json
from rebench.tables import Col, print_table

if TYPE_CHECKING:
    from rich.console import RenderableType

    from rebench.scheduler.progress import CampaignProgress

app = typer.Typer(help="Campaigns: list them, show one's progress (also one running elsewhere).",
                  no_args_is_help=True, add_completion=False)

STATE_NOTE = {"orphaned": "no live process runs it: `rebench run --resume {id}`"}


def _state(p: CampaignProgress) -> str:
    return f"{p.state} ({p.holder})" if p.holder else p.state


@app.command("list")
def list_command(db: DbOption = None, json_output: JsonOption = False,
                 limit: Annotated[int, typer.Option("--limit", min=1, help="Newest N campaigns.")] = 20) -> None:
    """Campaigns, newest first: state, agents, environments, attempts done/running/queued."""
    from rebench.scheduler.progress import all_campaigns

    found = all_campaigns(open_store(db), limit)
    if json_output:
        print_json([p.model_dump(mode="json") for p in found])
        return
    columns = [Col("id", key=True), Col("state", key=True), Col("created"), Col("agents"), Col("environments"),
               Col("done", justify="right"), Col("running", justify="right"), Col("queued", justify="right")]
    rows = [[str(p.campaign_id), _state(p), p.created_at.strftime("%Y-%m-%d %H:%M"),
             ",".join(sorted({g.agent for g in p.groups})), ",".join(sorted({g.environment for g in p.groups})),
             f"{p.done}/{p.planned}", str(p.running), str(p.queued)] for p in found]
    print_table(console, "Campaigns", columns, rows, more="--json",
                drop_first=("created", "environments", "agents"))


def render(p: CampaignProgress) -> RenderableType:
    """Per (environment, agent) a bar of the attempts done, with running/queued and an ETA."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"campaign {p.campaign_id}: {_state(p)}", title_justify="left")
    for header in ("environment", "agent", "progress", "done", "running", "queued", "retried", "mean wall"):
        table.add_column(header, no_wrap=header in ("environment", "agent"),
                         justify="right" if header not in ("environment", "agent", "progress") else "left")
    for g in p.groups:
        table.add_row(g.environment, g.agent, ProgressBar(total=max(g.planned, 1), completed=g.done, width=24),
                      f"{g.done}/{g.planned}", str(g.running), str(g.queued), str(g.retried),
                      format_duration(g.mean_wall_s) if g.mean_wall_s is not None else "-")
    eta = "" if p.eta_s is None else f", ETA {format_duration(p.eta_s)}"
    footer = f"{p.done}/{p.planned} done, {p.running} running, {p.queued} queued{eta}"
    note = STATE_NOTE.get(p.state, "").format(id=p.campaign_id)
    return Group(table, Text(footer + (f"; {note}" if note else "")))


@app.command("show")
def show_command(campaign_id: int, db: DbOption = None, json_output: JsonOption = False,
                 watch: Annotated[bool, typer.Option("--watch", help="Refresh every 2 s until the campaign ends.")]
                 = False) -> None:
    """One campaign's progress per environment and agent, with an ETA while it runs."""
    from rich.live import Live

    from rebench.scheduler.progress import campaign_progress

    store = open_store(db)
    progress = campaign_progress(store, campaign_id)
    if json_output:
        print_json({**progress.model_dump(mode="json"), "planned": progress.planned, "done": progress.done})
        return
    if not watch:
        console.print(render(progress))
        return
    with Live(render(progress), console=console, auto_refresh=False) as live:
        while progress.state == "running":
            time.sleep(2.0)
            progress = campaign_progress(store, campaign_id)
            live.update(render(progress), refresh=True)
