"""score@k estimators: each is a weight vector over one environment's sorted scores.

Every estimator here is linear in the order statistics: the expected best of k
attempts is a weighted sum of the scores sorted from best to worst, with weights
that depend only on n (the number of observed runs) and k. Computing the weights
once per (n, k) and applying them with one matrix product is what makes the
bootstrap cheap: 1000 resamples of one environment are one (1000 x n) @ (n x K)
product instead of 1000 Python loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from rebench.errors import RebenchError

EstimatorName = Literal["expected_max", "sampled_max"]
BestOfK = Literal["max", "mean"]
ESTIMATORS: tuple[EstimatorName, ...] = ("expected_max", "sampled_max")

FloatArray = NDArray[np.float64]


class Estimator(Protocol):
    """A score@k method: scores of shape (..., n) and k give the estimate of shape (...)."""

    def __call__(self, scores: ArrayLike, k: int) -> FloatArray: ...


@lru_cache(maxsize=4096)
def _expected_max_weights(n: int, k: int) -> tuple[float, ...]:
    """Weights of the descending order statistics for the best of k draws without replacement.

    The i-th best score (1-based) is the maximum of a k-subset exactly when the subset
    holds it and k - 1 of the n - i worse ones: C(n - i, k - 1) of the C(n, k) subsets.
    Integer arithmetic keeps this exact for any n; k > n is capped at n (the max).
    """
    k = min(k, n)
    total = math.comb(n, k)
    weights = [math.comb(n - i, k - 1) / total for i in range(1, n + 1)]
    norm = sum(weights)  # 1 up to rounding; renormalized so the estimate of constant data is exact
    return tuple(w / norm for w in weights)


@lru_cache(maxsize=4096)
def _sampled_max_weights(n: int, k: int) -> tuple[float, ...]:
    """Weights of the descending order statistics for the best of k draws with replacement.

    With ascending rank j (1-based), P(max of k draws has rank <= j) = (j / n)^k, so the
    rank-j score is the max with probability (j/n)^k - ((j-1)/n)^k. Ties get the same
    value either way, so the expectation is exact with ties too.
    """
    ascending = [(j / n) ** k - ((j - 1) / n) ** k for j in range(1, n + 1)]
    return tuple(reversed(ascending))


def order_weights(n: int, k: int, estimator: EstimatorName, best_of_k: BestOfK = "max") -> FloatArray:
    """The weight vector (length n, descending order) of one estimator at one k.

    `best_of_k == "mean"` is for environments whose score the agent cannot see: it
    cannot pick its best attempt, so best-of-k is a random pick, whose expectation is
    the mean for every k.
    """
    if n < 1:
        raise RebenchError("score@k needs at least one score")
    if k < 1:
        raise RebenchError(f"invalid k {k}: must be 1 or more")
    if best_of_k == "mean":
        return np.full(n, 1.0 / n)
    if estimator == "expected_max":
        return np.asarray(_expected_max_weights(n, k))
    if estimator == "sampled_max":
        return np.asarray(_sampled_max_weights(n, k))
    raise RebenchError(f"unknown estimator {estimator!r}; allowed: {', '.join(ESTIMATORS)}")


def weight_matrix(n: int, ks: Sequence[int], estimator: EstimatorName, best_of_k: BestOfK = "max") -> FloatArray:
    """Weights for several k at once, shape (n, len(ks))."""
    return np.stack([order_weights(n, k, estimator, best_of_k) for k in ks], axis=1)


def _sorted_desc(scores: ArrayLike) -> FloatArray:
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim == 0 or array.shape[-1] == 0:
        raise RebenchError("score@k needs at least one score")
    if not np.all(np.isfinite(array)):
        raise RebenchError("score@k got a NaN or infinite score; map invalid scores to 0 first")
    return -np.sort(-array, axis=-1)


def score_at_k(
    scores: ArrayLike,
    ks: Sequence[int],
    estimator: EstimatorName = "expected_max",
    best_of_k: BestOfK = "max",
) -> FloatArray:
    """Estimates for every k in `ks`: scores of shape (..., n) give shape (..., len(ks))."""
    ordered = _sorted_desc(scores)
    return ordered @ weight_matrix(ordered.shape[-1], ks, estimator, best_of_k)


def expected_max(scores: ArrayLike, k: int) -> FloatArray:
    """Exact expected best of k draws without replacement from the n scores (k > n is n).

    The method of METR's public analysis code (the unbiased estimator of arXiv:2406.06647).
    """
    return score_at_k(scores, [k], "expected_max")[..., 0]


def sampled_max(scores: ArrayLike, k: int) -> FloatArray:
    """Exact expected best of k draws with replacement (the paper's wording), no simulation."""
    return score_at_k(scores, [k], "sampled_max")[..., 0]


def random_pick(scores: ArrayLike, k: int) -> FloatArray:
    """Best-of-k when the score is hidden from the agent: a random pick, so the mean for any k."""
    return score_at_k(scores, [k], "expected_max", "mean")[..., 0]
