"""Scoring: the in-sandbox helper, score results, aggregation and normalization."""

from rebench.scoring.normalize import final_raw_score, normalize
from rebench.scoring.result import ScoreResult

__all__ = ["ScoreResult", "final_raw_score", "normalize"]
