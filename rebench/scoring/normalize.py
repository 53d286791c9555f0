"""Final score of an attempt and normalization to the 0 = start, 1 = reference scale.

Raw scores are stored; normalization happens at read time from the anchors of the
environment version and profile, so a change of anchors never rewrites history.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel


class ResolvedAnchors(BaseModel):
    """The anchors a normalized score is computed with, and where they came from (resolved by
    rebench.calibration, or measured beside re-scores by rebench.scoring.window)."""

    start: float
    reference: float
    kind: Literal["declared", "calibrated", "window"]
    """`window`: measured beside the attempt's re-scores (rebench.scoring.window)."""
    hardware: str | None = None
    heldout: ResolvedAnchors | None = None
    """The held-out split's anchors (a profile's `final_split`, docs/heldout.md), resolved the same
    way: calibrated here when a calibration measured them, else declared; None without a split."""


def is_valid(value: float | None) -> bool:
    """A score that counts: present and finite."""
    return value is not None and math.isfinite(value)


def final_raw_score(
    raws: Iterable[float | None],
    *,
    rule: Literal["best", "last", "rescore_best"],
    direction: Literal["lower", "higher"],
) -> float | None:
    """The attempt's final raw score by RE-Bench's rules: best or last valid one (None when none
    is valid). `rescore_best` starts from the best too; the runner then re-scores."""
    valid = [float(r) for r in raws if r is not None and is_valid(r)]
    if not valid:
        return None
    if rule == "last":
        return valid[-1]
    return min(valid) if direction == "lower" else max(valid)


def normalize(raw: float | None, start: float, reference: float, *, clip: bool = True) -> float:
    """(raw - start) / (reference - start); works for both directions because the
    denominator is negative when lower is better. Invalid scores are 0, and so are
    scores worse than the start when `clip` is set (the paper's rule)."""
    if not is_valid(raw):
        return 0.0
    assert raw is not None
    value = (raw - start) / (reference - start)
    return max(0.0, value) if clip else value
