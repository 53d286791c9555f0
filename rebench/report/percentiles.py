"""Standing among experts: which human percentile an agent's average score matches.

Per environment, percentiles 1..100 of the human 8 h scores; those curves are averaged
across environments (equal weight), and the agent's average score is located on the
averaged curve. This is the kind of statement the paper makes ("36th percentile").
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from rebench.errors import RebenchError
from rebench.report.estimators import FloatArray

PERCENTILES = np.arange(1, 101, dtype=np.float64)


def human_percentile_curve(human_scores: Mapping[str, ArrayLike]) -> FloatArray:
    """Percentiles 1..100 of each environment's human scores, averaged across environments."""
    if not human_scores:
        raise RebenchError("no human scores to compare with")
    curves = []
    for name, scores in human_scores.items():
        array = np.asarray(scores, dtype=np.float64)
        if array.size == 0:
            raise RebenchError(f"no human scores for environment {name!r}")
        curves.append(np.percentile(array, PERCENTILES))
    return np.mean(np.stack(curves), axis=0)


def locate_on_curve(score: float, curve: FloatArray) -> float:
    """The percentile (0..100) whose curve value the score reaches, interpolated linearly.

    Where the curve is flat (e.g. many zero scores) the score gets the highest percentile
    it reaches; below the 1st percentile it is 0, at or above the 100th it is 100.
    """
    reached = int(np.searchsorted(curve, score, side="right"))  # curve values <= score
    if reached == 0:
        return 0.0
    if reached >= curve.size:
        return 100.0
    low, high = curve[reached - 1], curve[reached]
    return float(reached + (score - low) / (high - low))


def human_percentile(score: float, human_scores: Mapping[str, ArrayLike]) -> float:
    return locate_on_curve(score, human_percentile_curve(human_scores))
