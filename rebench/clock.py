"""The attempt clock: monotonic wall time minus reason-tagged pauses.

RE-Bench budgets count working time: the clock stops for harness work (baseline
scoring, infrastructure trouble, provider retries) but not for the agent's own
thinking or commands. Pauses are intervals with reasons so reports can show
where the time went.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class PauseInterval:
    """One stretch of time that does not count against the budget."""

    reason: str
    start: float
    end: float | None = None

    def length(self, now: float) -> float:
        return (self.end if self.end is not None else now) - self.start


@dataclass
class AttemptClock:
    """Monotonic clock with nested-safe pauses. Not started until `start()`."""

    now: Callable[[], float] = time.monotonic
    started_at: float | None = None
    stopped_at: float | None = None
    pauses: list[PauseInterval] = field(default_factory=list)
    model_wait_s: float = 0.0

    def start(self) -> None:
        if self.started_at is None:
            self.started_at = self.now()

    def stop(self) -> None:
        if self.stopped_at is None:
            current = self.now()
            for pause in self.pauses:
                if pause.end is None:
                    pause.end = current
            self.stopped_at = current

    def _current(self) -> float:
        return self.stopped_at if self.stopped_at is not None else self.now()

    @property
    def paused(self) -> bool:
        return any(p.end is None for p in self.pauses)

    def wall_seconds(self) -> float:
        if self.started_at is None:
            return 0.0
        return self._current() - self.started_at

    def paused_seconds(self) -> float:
        """Total paused time, counting overlapping pauses once."""
        if self.started_at is None:
            return 0.0
        current = self._current()
        spans = sorted((p.start, p.end if p.end is not None else current) for p in self.pauses)
        total, cursor = 0.0, self.started_at
        for start, end in spans:
            start = max(start, cursor)
            if end > start:
                total += end - start
                cursor = end
        return total

    def working_seconds(self) -> float:
        return max(0.0, self.wall_seconds() - self.paused_seconds())

    def pause(self, reason: str) -> PauseInterval:
        interval = PauseInterval(reason=reason, start=self.now())
        self.pauses.append(interval)
        return interval

    def resume(self, interval: PauseInterval) -> None:
        if interval.end is None:
            interval.end = self.now()

    @contextmanager
    def paused_for(self, reason: str) -> Iterator[PauseInterval]:
        """Pause for the duration of a block (scoring setup, provider retry waits)."""
        interval = self.pause(reason)
        try:
            yield interval
        finally:
            self.resume(interval)

    def offset(self, instant: float) -> float:
        """Seconds since start for a monotonic instant (for storing pause bounds)."""
        return instant - (self.started_at if self.started_at is not None else instant)
