"""`rebench campaigns list|show`: campaigns and how far each is, from the store alone (so a
campaign running in another terminal, or on another host of the same database, shows too)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json
from rebench.tables import Col, print_table

if TYPE_CHECKING:
    from rebench.store.db import Store

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
                 watch: Annotated[bool, typer.Option("--watch", help="Refresh every 2 s until the campaign ends (in a pipe: a line per running attempt every --progress-every).")]
                 = False,
                 progress_every: Annotated[str | None, typer.Option("--progress-every", help="With --watch in a pipe or a log: how often to print the running attempts' lines, e.g. 5m (default: $REBENCH_PROGRESS_EVERY, else 5m).")]
                 = None) -> None:
    """One campaign's progress per environment and agent, with an ETA and its running attempts while it runs."""
    from rebench.scheduler.progress import campaign_progress
    from rebench.scheduler.progress_lines import progress_every as every

    interval = every(progress_every) if watch else None
    store = open_store(db, read_only=True)
    progress = campaign_progress(store, campaign_id)
    if json_output:
        from rebench.scheduler.attempt_progress import running_attempts

        attempts = [{**a.model_dump(mode="json"), "left_s": a.left_s} for a in running_attempts(store, campaign_id)]
        print_json({**progress.model_dump(mode="json"), "planned": progress.planned, "done": progress.done,
                    "error": progress.error, "interrupted": progress.interrupted, "attempts": attempts})
        return
    from rebench.scheduler.view import view_of

    if not watch:
        console.print(view_of(store, campaign_id))
        return
    if not console.is_terminal:
        _watch_lines(store, campaign_id, interval)
        return
    from rich.live import Live

    with Live(view_of(store, campaign_id), console=console, auto_refresh=False) as live:
        while progress.state == "running":
            time.sleep(2.0)
            progress = campaign_progress(store, campaign_id)
            live.update(view_of(store, campaign_id), refresh=True)


def _watch_lines(store: Store, campaign_id: int, every_s: float | None) -> None:
    """`--watch` in a pipe: the progress lines now, every `every_s` while the campaign runs, and the
    counts when it ends (`off`: only those two)."""
    from rebench.scheduler.progress import campaign_progress
    from rebench.scheduler.progress_lines import progress_lines

    def emit() -> None:
        for line in progress_lines(store, campaign_id):
            console.print(line, highlight=False, soft_wrap=True)

    emit()
    while campaign_progress(store, campaign_id).state == "running":
        time.sleep(every_s if every_s is not None else 2.0)
        if every_s is not None:
            emit()
    emit()
