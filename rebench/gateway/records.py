"""The gateway's rows (gateway_requests), written off the request's path: an answer never waits on a
SQLite commit. Rows queue in order and one writer commits each batch in a worker thread; `flush` (the
gateway's close) waits for every row. Requests without a valid token are rows for the first
UNAUTHORIZED_ROWS only; past them one summary row counts the rest, so a flood writes no rows."""

from __future__ import annotations

import asyncio
import contextlib

from rebench.store.db import Store
from rebench.store.models import GatewayRequest

UNAUTHORIZED_ROWS = 20
"""Requests without a valid token recorded one row each, per gateway; past them one summary row
counts the rest (updated every SUMMARY_EVERY and when the gateway closes)."""
SUMMARY_EVERY = 100
BATCH_S = 0.05
"""Rows gather this long before one transaction commits them all (as the attempt recorder's events do)."""


class Records:
    """One gateway's rows. Without a store (scoring outside an attempt) nothing is written."""

    def __init__(self, store: Store | None, attempt_id: int) -> None:
        self.store = store
        self.attempt_id = attempt_id
        self._pending: list[GatewayRequest | str] = []
        """Rows, and summary texts (a str: the summary row's new error)."""
        self._writer: asyncio.Task[None] | None = None
        self._summary_id: int | None = None
        self._now = asyncio.Event()
        """Set by `flush`: the writer commits at once instead of gathering a batch."""
        self.unauthorized = 0

    def add(self, row: GatewayRequest) -> None:
        if row.meter == "unauthorized":
            self.unauthorized += 1
            more = self.unauthorized - UNAUTHORIZED_ROWS
            if more > 0:
                if more == 1 or more % SUMMARY_EVERY == 0:
                    self._queue(self._summary_text())
                return
        self._queue(row)

    def _summary_text(self) -> str:
        return (f"{self.unauthorized - UNAUTHORIZED_ROWS} more requests without a valid token or with a malformed "
                f"head after the first {UNAUTHORIZED_ROWS} (not recorded one by one)")

    def _queue(self, item: GatewayRequest | str) -> None:
        if self.store is None:
            return
        self._pending.append(item)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(BATCH_S):
                await self._now.wait()
        while self._pending:
            batch, self._pending = self._pending, []
            with contextlib.suppress(Exception):  # a failed write never fails a request
                await asyncio.to_thread(self._write, batch)

    def _write(self, batch: list[GatewayRequest | str]) -> None:
        assert self.store is not None
        with self.store.session() as session:
            for item in batch:
                if isinstance(item, GatewayRequest):
                    session.add(item)
                    continue
                existing = session.get(GatewayRequest, self._summary_id) if self._summary_id is not None else None
                if existing is not None:
                    existing.error = item
                else:
                    row = GatewayRequest(attempt_id=self.attempt_id, meter="unauthorized", model="",
                                         endpoint="(summary)", status=401, error=item)
                    session.add(row)
                    session.flush()
                    self._summary_id = int(row.id)

    async def flush(self) -> None:
        """Every row queued so far committed (the summary brought up to date first)."""
        if self.unauthorized > UNAUTHORIZED_ROWS:
            self._queue(self._summary_text())
        self._now.set()
        try:
            while self._writer is not None and not self._writer.done():
                await asyncio.shield(self._writer)
        finally:
            self._now.clear()
