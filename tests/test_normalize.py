import math

import pytest

from rebench.scoring.normalize import final_raw_score, normalize


def test_lower_is_better_maps_start_to_zero_and_reference_to_one() -> None:
    start, reference = 1.5535302804958044, 0.4700036292457356
    assert normalize(start, start, reference) == pytest.approx(0.0)
    assert normalize(reference, start, reference) == pytest.approx(1.0)
    assert normalize(math.log(0.67), start, reference) == pytest.approx(1.80, abs=0.01)  # best human, paper


def test_higher_is_better() -> None:
    assert normalize(0.84, 0.24, 0.84) == pytest.approx(1.0)
    assert normalize(0.54, 0.24, 0.84) == pytest.approx(0.5)


def test_worse_than_start_is_clipped_unless_asked() -> None:
    assert normalize(2.0, 1.5, 0.5) == 0.0
    assert normalize(2.0, 1.5, 0.5, clip=False) == pytest.approx(-0.5)
    assert normalize(0.1, 0.24, 0.84, clip=False) < 0


def test_scores_above_reference_are_kept() -> None:
    assert normalize(0.0, 1.0, 0.5) == pytest.approx(2.0)


@pytest.mark.parametrize("raw", [None, math.nan, math.inf])
def test_invalid_is_zero(raw: float | None) -> None:
    assert normalize(raw, 1.0, 0.5) == 0.0


def test_best_respects_direction_and_skips_invalid() -> None:
    raws = [3.0, None, math.nan, 1.0, 2.0]
    assert final_raw_score(raws, rule="best", direction="lower") == 1.0
    assert final_raw_score(raws, rule="best", direction="higher") == 3.0


def test_last_valid_skips_trailing_invalid() -> None:
    assert final_raw_score([0.3, 0.9, None, math.nan], rule="last", direction="higher") == 0.9


def test_nothing_valid_gives_none() -> None:
    assert final_raw_score([None, math.nan], rule="best", direction="lower") is None
    assert final_raw_score([], rule="last", direction="higher") is None
