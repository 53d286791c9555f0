"""One writer per store for the events of every attempt it runs: rows buffered by all attempts are
committed together, in one transaction, by one thread.

With a writer thread per attempt, 64 attempts meant 64 threads waking every interval and 64
transactions queueing for SQLite's one write lock; one shared writer makes that one wake-up and one
transaction per interval whatever the number of attempts (benchmarks/load.py measures it). Order is
kept where it matters: rows enter the buffer in each attempt's own order, and a synchronous write (a
score, a pause, usage) commits everything buffered before it in the same transaction.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import insert
from sqlalchemy.orm import Session

from rebench.store.db import Store
from rebench.store.models import Event

T = TypeVar("T")


class BatchWriter:
    """Buffers event rows for one store and commits them every `interval_s` while any user is open."""

    def __init__(self, store: Store, interval_s: float) -> None:
        self.store = store
        self.interval_s = interval_s
        self._pending: list[dict[str, Any]] = []
        self._ops: list[Callable[[Session], object]] = []
        """Writes other than event rows (usage totals), run in order after the rows of the same transaction."""
        self._buffer_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._users = 0
        self._wake = threading.Condition()
        self._live = False
        """Whether the thread still serves: set and cleared under `_wake`, so a user that opens while the
        last one's thread is on its way out starts a new one (the thread's liveness would still say yes)."""
        self.thread: threading.Thread | None = None

    def open(self) -> None:
        """A user (an attempt's recorder) begins: the thread runs while there is one."""
        with self._wake:
            self._users += 1
            self._wake.notify_all()  # a last user's close waiting for the thread to end: it stays, for this one
            if not self._live:
                self._live = True
                self.thread = threading.Thread(target=self._loop, name="rebench-events", daemon=True)
                self.thread.start()

    def close(self) -> None:
        """A user ends: its rows (and any other's) are committed; the last one stops the thread."""
        with self._wake:
            self._users = max(0, self._users - 1)
            if self._users == 0 and self.thread is not threading.current_thread():
                self._wake.notify_all()
                # until the thread is out, or a new user keeps it (then it is that user's)
                self._wake.wait_for(lambda: not self._live or self._users > 0)
        self.commit()

    @property
    def running(self) -> bool:
        with self._wake:
            return self._live

    def add(self, row: dict[str, Any], number: Callable[[], int],
            op: Callable[[Session], object] | None = None) -> None:
        """Buffer one row; `number` gives its sequence number under the buffer's lock, so rows enter
        in their numbers' order. `op`, if any, is written in the same transaction as the row."""
        with self._buffer_lock:
            row["seq"] = number()
            self._pending.append(row)
            if op is not None:
                self._ops.append(op)
        if not self.running:  # no thread any more: written now
            self.commit()

    def _loop(self) -> None:
        while True:
            with self._wake:
                if self._users > 0:
                    self._wake.wait(self.interval_s)
                if self._users == 0:
                    self._live = False
                    self._wake.notify_all()
                    return
            with contextlib.suppress(Exception):  # the rows stay buffered; the next synchronous commit raises
                self.commit()

    def commit(self, then: Callable[[Session], T] | None = None) -> T | None:
        """Commit every buffered row and write, and `then`'s writes, in one transaction."""
        with self._write_lock:
            with self._buffer_lock:
                rows, self._pending = self._pending, []
                ops, self._ops = self._ops, []
            if not rows and not ops and then is None:
                return None
            try:
                with self.store.session() as session:
                    if rows:
                        session.execute(insert(Event), rows)
                    for op in ops:
                        op(session)
                    result = then(session) if then is not None else None
            except BaseException:
                with self._buffer_lock:
                    self._pending[:0] = rows  # not lost: the next commit tries them again
                    self._ops[:0] = ops
                raise
            return result


_WRITERS: weakref.WeakKeyDictionary[Store, dict[float, BatchWriter]] = weakref.WeakKeyDictionary()
_WRITERS_LOCK = threading.Lock()


def writer_for(store: Store, interval_s: float) -> BatchWriter:
    """The store's shared writer for this interval (a test that asks for no background writes gets its own)."""
    with _WRITERS_LOCK:
        by_interval = _WRITERS.setdefault(store, {})
        if interval_s not in by_interval:
            by_interval[interval_s] = BatchWriter(store, interval_s)
        return by_interval[interval_s]
