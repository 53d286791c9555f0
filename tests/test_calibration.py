"""Calibration keeps the best run of each solution: noise on a busy machine only slows runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebench.calibration import ResolvedAnchors, resolve_anchors, save_calibration
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


def test_heldout_anchors_come_from_the_newest_calibration_that_measured_them(fixture_envs: Path,
                                                                             tmp_path: Path) -> None:
    """A profile's held-out split (`final_split`) resolves like the anchors in force: measured here
    when a calibration measured it (by the same rule, the best run), else declared."""
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + HELDOUT_PROFILE)
    env = EnvironmentRegistry(fixture_envs).get("counter")
    store = Store(tmp_path / "rebench.db")
    declared = ResolvedAnchors(start=1.0, reference=21.0, kind="declared")
    assert resolve_anchors(store, env, "heldout").heldout == declared
    assert resolve_anchors(store, env, "tiny").heldout is None  # no final_split
    save_calibration(store, env, "heldout", [2.0] * 3, [12.0] * 3)  # e.g. a calibration made before 0012
    assert resolve_anchors(store, env, "heldout").heldout == declared
    save_calibration(store, env, "heldout", [2.0] * 3, [12.0] * 3, heldout_start=[3.0, 4.0, 3.0],
                     heldout_reference=[43.0, 40.0, 43.0])
    save_calibration(store, env, "heldout", [2.5] * 3, [12.0] * 3)
    anchors = resolve_anchors(store, env, "heldout")
    assert (anchors.start, anchors.kind) == (2.5, "calibrated")
    assert anchors.heldout == ResolvedAnchors(start=4.0, reference=43.0, kind="calibrated", hardware=anchors.hardware)
    with pytest.raises(RebenchError, match="held-out starting solution did not score validly"):
        save_calibration(store, env, "heldout", [2.0] * 3, [12.0] * 3, heldout_start=[3.0, None, 3.0],
                         heldout_reference=[43.0] * 3)
    with pytest.raises(RebenchError, match="held-out starting and reference scores are equal"):
        save_calibration(store, env, "heldout", [2.0] * 3, [12.0] * 3, heldout_start=[5.0] * 3,
                         heldout_reference=[5.0] * 3)
    assert resolve_anchors(store, env, "heldout").heldout == anchors.heldout  # nothing stored by either


HELDOUT_PROFILE = '''
[profiles.heldout]
resources = { gpus = 0, cpus = 1, memory_gb = 1 }
direction = "higher"
final_score = "best"
anchors = { start = 1.0, reference = 11.0, source = "by construction" }
params = { secret_file = "answer.txt", split = "intermediate" }
final_split = { params = { split = "final" }, anchors = { start = 1.0, reference = 21.0 } }
'''
