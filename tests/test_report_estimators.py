"""score@k estimators and the bootstrap: checked against brute force, hand-computed cases and simulation."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from rebench.errors import RebenchError
from rebench.report.bootstrap import EnvironmentScores, bootstrap_score_at_k
from rebench.report.estimators import expected_max, random_pick, sampled_max, score_at_k


def _brute_expected_max(scores: list[float], k: int) -> float:
    """Average over every k-subset of its maximum (no replacement)."""
    k = min(k, len(scores))
    maxima = [max(c) for c in itertools.combinations(scores, k)]
    return sum(maxima) / len(maxima)


def _brute_sampled_max(scores: list[float], k: int) -> float:
    """Average over every ordered k-tuple (with replacement) of its maximum."""
    maxima = [max(c) for c in itertools.product(scores, repeat=k)]
    return sum(maxima) / len(maxima)


def test_hand_computed_small_cases() -> None:
    # {0,1}->1, {0,2}->2, {1,2}->2: 5/3 without replacement
    assert expected_max([0.0, 1.0, 2.0], 2) == pytest.approx(5 / 3)
    # 9 ordered pairs with maxima 0,1,2,1,1,2,2,2,2: 13/9 with replacement
    assert sampled_max([0.0, 1.0, 2.0], 2) == pytest.approx(13 / 9)
    # ties: every pair of [1, 1, 0] holds a 1
    assert expected_max([1.0, 1.0, 0.0], 2) == pytest.approx(1.0)
    assert sampled_max([1.0, 1.0, 0.0], 2) == pytest.approx(float(1 - Fraction(1, 9)))
    assert expected_max([0.2, 0.9, 0.5, 0.1], 3) == pytest.approx((0.9 * 3 + 0.5) / 4)


@pytest.mark.parametrize("seed", range(5))
def test_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = list(rng.exponential(0.5, size=6))
    for k in range(1, 8):
        assert expected_max(scores, k) == pytest.approx(_brute_expected_max(scores, k))
    for k in range(1, 5):
        assert sampled_max(scores, k) == pytest.approx(_brute_sampled_max(scores, k))


def test_k_one_is_the_mean_and_k_at_least_n_is_the_max() -> None:
    scores = np.random.default_rng(1).random(13)
    assert expected_max(scores, 1) == pytest.approx(scores.mean())
    assert sampled_max(scores, 1) == pytest.approx(scores.mean())
    assert expected_max(scores, 13) == pytest.approx(scores.max())
    assert expected_max(scores, 500) == pytest.approx(scores.max())  # k > n is capped at n


def test_both_rise_with_k() -> None:
    scores = np.random.default_rng(2).lognormal(size=40)
    ks = list(range(1, 129))
    for estimator in ("expected_max", "sampled_max"):
        values = score_at_k(scores, ks, estimator)  # type: ignore[arg-type]
        assert np.all(np.diff(values) >= -1e-12), estimator
        assert values[-1] > values[0]
    # without replacement reaches the max by k = n; with replacement it is still below it
    assert score_at_k(scores, [40], "expected_max")[0] == pytest.approx(scores.max())
    assert score_at_k(scores, [40], "sampled_max")[0] < scores.max()


@pytest.mark.parametrize("seed", range(3))
def test_sampled_max_agrees_with_simulation(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    scores = rng.exponential(0.4, size=int(rng.integers(5, 40)))
    for k in (1, 3, 8, 32):
        draws = rng.choice(scores, size=(200_000, k), replace=True).max(axis=1)
        assert abs(float(sampled_max(scores, k)) - draws.mean()) < 0.005


def test_hidden_score_is_a_random_pick() -> None:
    scores = [0.1, 0.7, 0.4]
    for k in (1, 2, 16):
        assert random_pick(scores, k) == pytest.approx(0.4)
        assert score_at_k(scores, [k], "sampled_max", "mean")[0] == pytest.approx(0.4)


def test_vectorized_rows_equal_one_at_a_time() -> None:
    batch = np.random.default_rng(3).random((50, 9))
    got = score_at_k(batch, [1, 2, 4, 8, 16], "expected_max")
    for row, values in zip(batch, got, strict=True):
        assert values == pytest.approx([_brute_expected_max(list(row), k) for k in (1, 2, 4, 8, 16)])


def test_bad_input_is_a_user_error() -> None:
    with pytest.raises(RebenchError, match="NaN"):
        expected_max([0.1, float("nan")], 1)
    with pytest.raises(RebenchError, match="at least one"):
        expected_max([], 1)
    with pytest.raises(RebenchError, match="invalid k"):
        expected_max([0.1], 0)
    with pytest.raises(RebenchError, match="unknown estimator"):
        score_at_k([0.1], [1], "median")  # type: ignore[arg-type]


def test_bootstrap_equal_weights_and_reference_loop() -> None:
    """The vectorized bootstrap against a plain loop over the same resample indices."""
    rng = np.random.default_rng(7)
    data = {
        "a": EnvironmentScores(rng.exponential(size=5)),
        "b": EnvironmentScores(rng.exponential(size=23)),
        "hidden": EnvironmentScores(rng.exponential(size=9), best_of_k="mean"),
    }
    ks = [1, 4, 16]
    result = bootstrap_score_at_k(data, ks, "expected_max", n_bootstrap=300, seed=11)
    per_env = {name: score_at_k(env.scores, ks, "expected_max", env.best_of_k) for name, env in data.items()}
    assert result.mean_point == pytest.approx(np.mean(list(per_env.values()), axis=0))
    assert result.per_env_point[result.environments.index("hidden")] == pytest.approx(
        [data["hidden"].scores.mean()] * 3
    )

    loop_rng = np.random.default_rng(11)
    replicates = []
    for name in sorted(data):
        env = data[name]
        idx = loop_rng.integers(0, env.scores.size, size=(300, env.scores.size))
        replicates.append([[_brute_or_mean(list(env.scores[i]), k, env.best_of_k) for k in ks] for i in idx])
    loop_means = np.mean(np.asarray(replicates), axis=0)
    assert result.mean_replicates == pytest.approx(loop_means)
    assert result.mean_low == pytest.approx(np.percentile(loop_means, 2.5, axis=0))
    assert result.mean_high == pytest.approx(np.percentile(loop_means, 97.5, axis=0))
    again = bootstrap_score_at_k(data, ks, "expected_max", n_bootstrap=300, seed=11)
    assert again.mean_low == pytest.approx(result.mean_low)  # same seed, same interval
    assert np.all(result.mean_low <= result.mean_point + 1e-9)
    assert np.all(result.mean_high >= result.mean_low)


def _brute_or_mean(scores: list[float], k: int, mode: str) -> float:
    """One replicate's estimate the slow way: plain mean, or the max averaged over k-subsets."""
    if mode == "mean":
        return float(np.mean(scores))
    if k >= len(scores):
        return max(scores)
    return _brute_expected_max(scores, k) if len(scores) <= 10 else float(expected_max(scores, k))


def test_bootstrap_interval_is_exact_for_constant_scores_and_seeded() -> None:
    """Constant scores give a zero-width interval; the resamples depend on the seed and only on it."""
    data = {"a": EnvironmentScores(np.full(6, 0.5)), "b": EnvironmentScores(np.full(3, 1.5))}
    result = bootstrap_score_at_k(data, [1, 8], n_bootstrap=50, seed=0)
    assert result.mean_point == pytest.approx([1.0, 1.0])
    assert result.mean_low == pytest.approx([1.0, 1.0])
    assert result.mean_high == pytest.approx([1.0, 1.0])
    noisy = {"a": EnvironmentScores(np.random.default_rng(0).random(10))}
    first = bootstrap_score_at_k(noisy, [2], n_bootstrap=200, seed=1)
    again = bootstrap_score_at_k(noisy, [2], n_bootstrap=200, seed=1)
    other = bootstrap_score_at_k(noisy, [2], n_bootstrap=200, seed=2)
    # One seed, run twice: the very same resamples, so the same replicates and interval, bit for bit.
    np.testing.assert_array_equal(again.mean_replicates, first.mean_replicates)
    np.testing.assert_array_equal(again.per_env_low, first.per_env_low)
    np.testing.assert_array_equal(again.per_env_high, first.per_env_high)
    # Another seed draws other resamples (200 of 10 noisy runs: equal replicates would be a fixed generator).
    assert not np.array_equal(other.mean_replicates, first.mean_replicates)
    with pytest.raises(RebenchError):
        bootstrap_score_at_k(noisy, [2], n_bootstrap=0)
