"""Calibration keeps the best run of each solution: noise on a busy machine only slows runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebench.calibration import resolve_anchors, save_calibration
from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.store.db import Store

from .conftest import REPO


def test_lower_is_better_keeps_the_fastest_run_of_each_solution(tmp_path: Path) -> None:
    """Under RE-Bench's rule (the kernel's paper profile) the best run of each solution is kept."""
    store = Store(tmp_path / "rebench.db")
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    row = save_calibration(store, env, "paper", [4.7, 4.5, 4.9], [3.4, 3.6, 3.3])
    assert (row.start_raw, row.reference_raw) == (4.5, 3.3)
    anchors = resolve_anchors(store, env, "paper")
    assert anchors.kind == "calibrated" and (anchors.start, anchors.reference) == (4.5, 3.3)


def test_the_kernel_tiny_profile_keeps_the_median_as_its_final_rule_does(tmp_path: Path) -> None:
    store = Store(tmp_path / "rebench.db")
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    assert env.profile("tiny").final_score == "rescore_best"
    row = save_calibration(store, env, "tiny", [4.7, 4.5, 4.9], [3.4, 3.6, 3.3])
    assert (row.start_raw, row.reference_raw) == (4.7, 3.4)


def test_an_invalid_run_fails_calibration_and_stores_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "rebench.db")
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    with pytest.raises(RebenchError, match="reference solution did not score validly"):
        save_calibration(store, env, "tiny", [4.7, 4.5, 4.9], [3.4, None, 3.3])
    assert resolve_anchors(store, env, "tiny").kind == "declared"
