"""The campaign's progress drawn with rich: bars per environment and agent, and the live view
`rebench run` keeps under its log lines on a terminal."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table

from rebench.budget import format_duration
from rebench.literal import literal_text
from rebench.scheduler.attempt_progress import AttemptProgress, budget_eta_s, queued_budget, running_attempts
from rebench.scheduler.progress import CampaignProgress, campaign_progress
from rebench.scheduler.progress_lines import ProgressLines
from rebench.store.db import Store, default_db_path

STATE_NOTE = {"orphaned": "no live process runs it: `rebench run --resume {id}`"}


def render(p: CampaignProgress, attempts: list[AttemptProgress] | None = None,
           queued_budget_s: float = 0.0) -> RenderableType:
    """Per (environment, agent) a bar of the attempts done, with running/queued and an ETA; with
    `attempts`, a row per running attempt (working time used and left, latest score, tokens, cost)
    and the most the campaign can still take by its budgets."""
    table = Table(title=literal_text(f"campaign {p.campaign_id}: {p.state_text}"), title_justify="left")
    for header in ("environment", "agent", "progress", "done", "error", "interrupted", "running", "queued",
                   "retried", "mean wall"):
        table.add_column(header, no_wrap=header in ("environment", "agent"),
                         justify="right" if header not in ("environment", "agent", "progress") else "left")
    for g in p.groups:
        table.add_row(literal_text(g.environment), literal_text(g.agent),
                      ProgressBar(total=max(g.planned, 1), completed=g.done, width=24),
                      f"{g.done}/{g.planned}", str(g.error), str(g.interrupted), str(g.running), str(g.queued),
                      str(g.retried),
                      format_duration(g.mean_wall_s) if g.mean_wall_s is not None else "-")
    eta = "" if p.eta_s is None else f", ETA {format_duration(p.eta_s)}"
    if attempts is not None and p.state == "running":
        eta += f", at most {format_duration(budget_eta_s(p, attempts, queued_budget_s))} by the budgets"
    footer = f"{p.counts_text()}, {p.running} running, {p.queued_text()}{eta}"
    note = STATE_NOTE.get(p.state, "").format(id=p.campaign_id)
    parts: list[RenderableType] = [table]
    if attempts:
        parts.append(_attempt_rows(attempts))
    parts.append(literal_text(footer + (f"; {note}" if note else "")))
    if p.concurrency:
        parts.append(literal_text(f"at once: {p.concurrency.text}"))
    return Group(*parts)


def _attempt_rows(attempts: list[AttemptProgress]) -> Table:
    table = Table(title="running attempts", title_justify="left")
    for header in ("attempt", "environment", "agent", "used", "left", "latest score", "tokens", "cost"):
        table.add_column(header, justify="left" if header in ("environment", "agent") else "right")
    for a in attempts:
        table.add_row(str(a.attempt_id), literal_text(a.environment), literal_text(a.agent),
                      format_duration(a.working_s), format_duration(a.left_s), a.score_text(), str(a.tokens),
                      f"${a.cost_usd:.4f}")
    return table


def view_of(store: Store, campaign_id: int) -> RenderableType:
    """The campaign's bars and its running attempts' rows, as `rebench run` and `campaigns show --watch` draw them."""
    return render(campaign_progress(store, campaign_id), running_attempts(store, campaign_id),
                  queued_budget(store, campaign_id))


class CampaignLive:
    """`rebench run`'s progress: on a terminal, the campaign's bars and running attempts under the
    attempt log lines, redrawn each second from the store (what `campaigns show --watch` shows
    elsewhere); in a pipe or a log, a line per running attempt every `every_s`
    (rebench.scheduler.progress_lines; None: none)."""

    def __init__(self, db: Path | None, out: Console, interval_s: float = 1.0,
                 every_s: float | None = None) -> None:
        self.db = db
        self.console = out
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lines = (ProgressLines(db, every_s, lambda line: out.print(literal_text(f"  {line}"),
                                                                         soft_wrap=True))
                       if every_s is not None else None)

    def start(self, campaign_id: int) -> None:
        if not self.console.is_terminal:
            if self._lines is not None:
                self._lines.start(campaign_id)
            return
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, args=(campaign_id,), daemon=True,
                                        name="rebench-campaign-view")
        self._thread.start()

    def _loop(self, campaign_id: int) -> None:
        from rich.live import Live

        store = Store(self.db if self.db is not None else default_db_path())
        try:
            with Live(view_of(store, campaign_id), console=self.console, auto_refresh=False) as live:
                while not self._stop.wait(self.interval_s):
                    with contextlib.suppress(Exception):  # a locked database for a moment: next time
                        live.update(view_of(store, campaign_id), refresh=True)
                with contextlib.suppress(Exception):
                    live.update(view_of(store, campaign_id), refresh=True)
        finally:
            store.close()

    def stop(self) -> None:
        self._stop.set()
        if self._lines is not None:
            self._lines.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
