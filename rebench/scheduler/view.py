"""The campaign's progress drawn with rich: bars per environment and agent, and the live view
`rebench run` keeps under its log lines on a terminal."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from rebench.budget import format_duration
from rebench.scheduler.progress import CampaignProgress, campaign_progress
from rebench.store.db import Store, default_db_path

STATE_NOTE = {"orphaned": "no live process runs it: `rebench run --resume {id}`"}


def render(p: CampaignProgress) -> RenderableType:
    """Per (environment, agent) a bar of the attempts done, with running/queued and an ETA."""
    table = Table(title=f"campaign {p.campaign_id}: {p.state_text}", title_justify="left")
    for header in ("environment", "agent", "progress", "done", "error", "interrupted", "running", "queued",
                   "retried", "mean wall"):
        table.add_column(header, no_wrap=header in ("environment", "agent"),
                         justify="right" if header not in ("environment", "agent", "progress") else "left")
    for g in p.groups:
        table.add_row(g.environment, g.agent, ProgressBar(total=max(g.planned, 1), completed=g.done, width=24),
                      f"{g.done}/{g.planned}", str(g.error), str(g.interrupted), str(g.running), str(g.queued),
                      str(g.retried),
                      format_duration(g.mean_wall_s) if g.mean_wall_s is not None else "-")
    eta = "" if p.eta_s is None else f", ETA {format_duration(p.eta_s)}"
    footer = f"{p.counts_text()}, {p.running} running, {p.queued} queued{eta}"
    note = STATE_NOTE.get(p.state, "").format(id=p.campaign_id)
    return Group(table, Text(footer + (f"; {note}" if note else "")))


class CampaignLive:
    """`rebench run`'s live view on a terminal: the campaign's bars under the attempt log lines,
    redrawn each second from the store (what `campaigns show --watch` shows elsewhere)."""

    def __init__(self, db: Path | None, out: Console, interval_s: float = 1.0) -> None:
        self.db = db
        self.console = out
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, campaign_id: int) -> None:
        if not self.console.is_terminal or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, args=(campaign_id,), daemon=True,
                                        name="rebench-campaign-view")
        self._thread.start()

    def _loop(self, campaign_id: int) -> None:
        from rich.live import Live

        store = Store(self.db if self.db is not None else default_db_path())
        try:
            with Live(render(campaign_progress(store, campaign_id)), console=self.console,
                      auto_refresh=False) as live:
                while not self._stop.wait(self.interval_s):
                    with contextlib.suppress(Exception):  # a locked database for a moment: next time
                        live.update(render(campaign_progress(store, campaign_id)), refresh=True)
                with contextlib.suppress(Exception):
                    live.update(render(campaign_progress(store, campaign_id)), refresh=True)
        finally:
            store.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
