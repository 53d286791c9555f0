"""Periodic progress lines for a pipe or a log, where a live view cannot draw: every
`--progress-every` (or `$REBENCH_PROGRESS_EVERY`, default 5m) a line for the campaign and one per
running attempt (rebench.scheduler.attempt_progress), so a campaign of many hours never goes
silent after "agent running"."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from rebench.budget import parse_duration
from rebench.errors import RebenchError
from rebench.scheduler.attempt_progress import campaign_line, queued_budget, running_attempts
from rebench.scheduler.progress import campaign_progress
from rebench.store.db import Store, default_db_path

ENV_VAR = "REBENCH_PROGRESS_EVERY"
DEFAULT_EVERY = "5m"


def progress_every(text: str | None) -> float | None:
    """Seconds between progress lines from `--progress-every`, else the environment variable, else 5m;
    `off` prints none. A bad value is a one-line RebenchError naming it."""
    source = "--progress-every" if text is not None else ENV_VAR
    value = text if text is not None else os.environ.get(ENV_VAR) or DEFAULT_EVERY
    if value.strip().lower() == "off":
        return None
    try:
        return float(parse_duration(value))
    except RebenchError:
        raise RebenchError(f"invalid {source} {value!r}: use a duration like 30s, 5m or 1h, or off") from None


def progress_lines(store: Store, campaign_id: int) -> list[str]:
    """The campaign's line, then one per running attempt."""
    running = running_attempts(store, campaign_id)
    progress = campaign_progress(store, campaign_id)
    return [campaign_line(progress, running, queued_budget(store, campaign_id)), *(a.line() for a in running)]


class ProgressLines:
    """A thread printing `progress_lines` through `emit` every `every_s` until stopped."""

    def __init__(self, db: Path | None, every_s: float, emit: Callable[[str], None]) -> None:
        self.db = db
        self.every_s = every_s
        self.emit = emit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, campaign_id: int) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, args=(campaign_id,), daemon=True,
                                        name="rebench-progress-lines")
        self._thread.start()

    def _loop(self, campaign_id: int) -> None:
        store = Store(self.db if self.db is not None else default_db_path())
        try:
            while not self._stop.wait(self.every_s):
                with contextlib.suppress(Exception):  # a locked database for a moment: next time
                    for line in progress_lines(store, campaign_id):
                        self.emit(line)
        finally:
            store.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
