"""Working time of an attempt with and without audited pause corrections.

The recorded clock (the `pauses` table, `attempts.working_s`) is never edited: a break
an expert forgot to report is added afterwards as a `PauseCorrection` row (`rebench human
adjust`). Everything that shows or uses a human attempt's working time goes through
`working_time` and `corrected_at`, so the attempt list, the report and the `adjust` command
agree on one number. Offsets are seconds since the attempt clock started (pauses'
start_s/end_s); a correction overlapping a recorded pause (or another correction) counts once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rebench.store.models import FINISHED_STATUSES, Attempt, HumanSession, Pause, PauseCorrection

Interval = tuple[float, float]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping union of intervals (empty ones dropped)."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def covered(intervals: Iterable[Interval], start: float, end: float) -> float:
    """Seconds of [start, end] inside the union of `intervals`."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in merge(intervals))


def span_end(attempt: Attempt, human: HumanSession | None = None, now: float | None = None) -> float:
    """Where the attempt's clock span ends, as an offset: its wall time once finished; for a running
    human attempt, now (its stored wall time lags behind the supervisor's last update)."""
    if attempt.status in FINISHED_STATUSES or human is None or human.clock_origin is None:
        return float(attempt.wall_s)
    return max(float(attempt.wall_s), (time.time() if now is None else now) - human.clock_origin)


def _pause_intervals(pauses: Sequence[Pause], end: float) -> list[Interval]:
    """Recorded pauses clipped to [0, end]; an open one runs to `end`."""
    return [(max(0.0, p.start_s), min(end, p.end_s if p.end_s is not None else end)) for p in pauses]


def _correction_intervals(corrections: Sequence[PauseCorrection], end: float) -> list[Interval]:
    return [(max(0.0, c.start_s), min(end, c.end_s)) for c in corrections]


@dataclass(frozen=True)
class WorkingTime:
    """An attempt's working time as recorded (`uncorrected_s`, = attempts.working_s once it ended)
    and with its pause corrections taken out (`corrected_s`)."""

    wall_s: float
    uncorrected_s: float
    corrected_s: float

    @property
    def corrections_s(self) -> float:
        """Working time the corrections took out (overlaps with recorded pauses counted once)."""
        return self.uncorrected_s - self.corrected_s


def working_time(attempt: Attempt, pauses: Sequence[Pause], corrections: Sequence[PauseCorrection],
                 human: HumanSession | None = None, now: float | None = None) -> WorkingTime:
    """Working time of `attempt` without and with `corrections`, both clipped to its clock span.

    A finished attempt's uncorrected time is its stored `working_s` (the number its budget was
    enforced on); a running one's is computed from its pauses up to now.
    """
    end = span_end(attempt, human, now)
    recorded = _pause_intervals(pauses, end)
    if attempt.status in FINISHED_STATUSES or human is None or human.clock_origin is None:
        uncorrected = float(attempt.working_s)
    else:
        uncorrected = max(0.0, end - covered(recorded, 0.0, end))
    extra = covered(recorded + _correction_intervals(corrections, end), 0.0, end) - covered(recorded, 0.0, end)
    return WorkingTime(wall_s=end, uncorrected_s=uncorrected, corrected_s=max(0.0, uncorrected - extra))


def corrected_at(working_s: float, pauses: Sequence[Pause], corrections: Sequence[PauseCorrection]) -> float:
    """The corrected working time at the moment the recorded clock showed `working_s` (a score
    event's time, say): the corrections that lie before that moment, outside recorded pauses,
    are taken out. The moment is the earliest clock offset at which `working_s` was reached."""
    if not corrections:
        return working_s
    recorded = merge((max(0.0, p.start_s), p.end_s if p.end_s is not None else float("inf")) for p in pauses)
    offset, worked = 0.0, 0.0
    for start, end in recorded:  # walk the working stretches between recorded pauses
        if worked + (start - offset) >= working_s or math.isinf(end):
            break
        worked += start - offset
        offset = end
    moment = offset + (working_s - worked)
    extra = covered(recorded + _correction_intervals(corrections, moment), 0.0, moment) - covered(
        recorded, 0.0, moment)
    return max(0.0, working_s - extra)
