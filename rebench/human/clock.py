"""The clock of a human attempt, rebuilt from the database in another process.

A human attempt outlives its supervisor process, so its clock cannot be monotonic time in
memory: it is wall time counted from `HumanSession.clock_origin`, minus the pause intervals
stored in `pauses` (offsets from the origin). A new supervisor rebuilds it from those rows and
adds a "harness-down" pause for the time between the dead supervisor's last heartbeat and now,
so the expert is not charged for the time nobody could serve their `task` commands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sqlalchemy import select

from rebench.clock import AttemptClock, PauseInterval
from rebench.store.db import Store
from rebench.store.models import Pause

HARNESS_DOWN = "harness-down"
WAITING = "waiting"
BREAK = "break"


def wall_clock() -> AttemptClock:
    """A clock on Unix time: offsets stay meaningful to the next process."""
    return AttemptClock(now=time.time)


@dataclass
class RestoredClock:
    clock: AttemptClock
    open_pauses: dict[str, tuple[PauseInterval, int]] = field(default_factory=dict)
    """Pauses still open (reason -> interval and its `pauses` row id): `waiting` or `break`."""


def restore_clock(store: Store, attempt_id: int, origin: float, *, down_since: float | None = None,
                  now: float | None = None, persist: bool = True) -> RestoredClock:
    """The attempt clock as stored, with a closed "harness-down" pause [down_since, now] when given.

    Open pauses of harness work ("setup", "score", "snapshot") are closed at `down_since`: the
    process that opened them is gone and the harness-down pause covers the rest. `persist=False`
    only reads (`rebench human status`): nothing is written.
    """
    current = time.time() if now is None else now
    clock = AttemptClock(now=time.time)
    clock.started_at = origin
    restored = RestoredClock(clock)
    with store.session() as session:  # one transaction: a resumed clock is written whole or not at all
        rows = list(session.scalars(select(Pause).where(Pause.attempt_id == attempt_id).order_by(Pause.id)))
        for row in rows:
            interval = PauseInterval(reason=row.reason, start=origin + row.start_s,
                                     end=None if row.end_s is None else origin + row.end_s)
            if interval.end is None and row.reason not in (WAITING, BREAK):
                interval.end = max(interval.start, down_since if down_since is not None else current)
                if persist:
                    row.end_s = interval.end - origin
            clock.pauses.append(interval)
            if interval.end is None:
                restored.open_pauses[row.reason] = (interval, row.id)
        if down_since is not None and current > down_since:
            down = PauseInterval(reason=HARNESS_DOWN, start=down_since, end=current)
            clock.pauses.append(down)
            if persist:
                session.add(Pause(attempt_id=attempt_id, reason=HARNESS_DOWN, start_s=down_since - origin,
                                  end_s=current - origin))
    return restored
