"""Time allocation and the human-percentile standing."""

from __future__ import annotations

import numpy as np
import pytest

from rebench.errors import RebenchError
from rebench.report.allocation import allocation_for, parse_total_budgets
from rebench.report.percentiles import human_percentile, human_percentile_curve, locate_on_curve


def test_allocations_of_a_total_budget() -> None:
    eight_hours = 8 * 3600.0
    assert allocation_for(eight_hours, 1800).k == 16  # type: ignore[union-attr]
    assert allocation_for(eight_hours, 7200).label == "2h@4"  # type: ignore[union-attr]
    assert allocation_for(eight_hours, 28800).k == 1  # type: ignore[union-attr]
    cut = allocation_for(7200, 28800)
    assert cut is not None and cut.truncated and cut.k == 1 and cut.total_s == 7200
    assert cut.label == "8h cut to 2h"
    assert allocation_for(3 * 3600, 7200) is None  # 3 h is not a whole number of 2 h attempts


def test_parse_total_budgets() -> None:
    assert parse_total_budgets(None) == (1800, 7200, 28800, 57600, 115200)
    assert parse_total_budgets("8h, 2h,2h") == (7200, 28800)
    with pytest.raises(RebenchError, match="invalid duration '2 days'"):
        parse_total_budgets("2h,2 days")
    with pytest.raises(RebenchError, match="no total budgets"):
        parse_total_budgets(" , ")


def test_percentile_curve_is_averaged_across_environments() -> None:
    a = np.arange(1, 101, dtype=float)  # percentile p of 1..100 is about p
    b = 2 * a
    curve = human_percentile_curve({"a": a, "b": b})
    assert curve == pytest.approx(1.5 * np.percentile(a, np.arange(1, 101)))


def test_locate_on_curve() -> None:
    curve = np.arange(1, 101, dtype=float) / 100  # percentile p has value p/100
    assert locate_on_curve(0.36, curve) == pytest.approx(36)
    assert locate_on_curve(0.365, curve) == pytest.approx(36.5)
    assert locate_on_curve(0.001, curve) == 0.0
    assert locate_on_curve(5.0, curve) == 100.0
    flat = np.concatenate([np.zeros(30), np.linspace(0.1, 1.0, 70)])
    assert locate_on_curve(0.0, flat) == pytest.approx(30)  # reaches every zero percentile


def test_human_percentile_of_a_known_score() -> None:
    rng = np.random.default_rng(0)
    humans = {"a": rng.random(1000), "b": rng.random(1000)}
    assert human_percentile(0.5, humans) == pytest.approx(50, abs=3)
    with pytest.raises(RebenchError):
        human_percentile(0.5, {})
