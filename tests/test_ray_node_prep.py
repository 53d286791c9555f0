"""What a Ray worker node prepares before an attempt (rebench.scheduler.ray_node_prep), in this process
on the local backend: the calibration it keeps for a campaign run, and the keys an attempt needs."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig
from rebench.calibration import hardware_fingerprint
from rebench.env_service import build_for_backend
from rebench.environments.metadata import Gateway
from rebench.environments.registry import EnvironmentRegistry
from rebench.observer import Observer
from rebench.scheduler import ray_node_prep
from rebench.scheduler.ray_node_prep import NodeCalibration, calibrate_node, kept_path, key_variables, needs_calibration
from rebench.store.db import Store


def test_a_node_measures_once_per_campaign_run_and_never_follows_a_link_in_its_cache(
        fixture_envs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second attempt of a run reuses the kept row (same measurement, added to its own scratch
    store); another run measures again; a link put where a run's row is kept is not read: the node
    measures (1 and 11), never the 0 and 1000 the link's target claims."""
    monkeypatch.setattr(ray_node_prep, "cache_dir", lambda: tmp_path / "node-cache")
    toml = fixture_envs / "counter" / "environment.toml"
    timing = 'direction = "higher"\nhardware_dependent = true'
    toml.write_text(toml.read_text().replace('direction = "higher"', timing, 1))
    env = EnvironmentRegistry().get("counter")
    build_for_backend(env, "tiny", "local", Observer())
    hardware = hardware_fingerprint().key
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(contextlib.closing(Store(tmp_path / f"scratch{i}.db"))) for i in range(4)]
        assert needs_calibration(stores[0], env, "tiny", hardware)
        first = calibrate_node(stores[0], env, "tiny", "local", "run-a", hardware)
        assert (first.start_raw, first.reference_raw, first.hardware) == (1.0, 11.0, hardware)
        again = calibrate_node(stores[1], env, "tiny", "local", "run-a", hardware)
        assert again == first  # kept: its measurement's own time, not a new one
        assert not needs_calibration(stores[1], env, "tiny", hardware)
        other = calibrate_node(stores[2], env, "tiny", "local", "run-b", hardware)
        assert other.created_at > first.created_at

        lure = tmp_path / "lure.json"
        lure.write_text(first.model_copy(update={"start_raw": 0.0, "reference_raw": 1000.0}).model_dump_json())
        kept_path("run-c", env, "tiny", hardware).symlink_to(lure)
        measured = calibrate_node(stores[3], env, "tiny", "local", "run-c", hardware)
        assert (measured.start_raw, measured.reference_raw) == (1.0, 11.0)
        assert not kept_path("run-c", env, "tiny", hardware).is_symlink()
        assert NodeCalibration.model_validate_json(lure.read_text()).reference_raw == 1000.0  # target untouched


def test_the_keys_an_attempt_needs_are_its_models_and_its_gateways() -> None:
    installed = AgentConfig(name="claude-code", model="anthropic/m")
    named = AgentConfig(name="modular", model="openai/m", args={"api_key_env": "my_team_key"})
    gateway = Gateway(model="g", upstream="openai/g")
    assert key_variables(installed, None) == {"ANTHROPIC_API_KEY"}
    assert key_variables(named, gateway) == {"OPENAI_API_KEY", "my_team_key"}
    assert key_variables(AgentConfig(name="replay"), None) == set()
    assert key_variables(AgentConfig(name="modular", model="openai/m", args={"api_key_env": "X; rm"}), None) == {
        "OPENAI_API_KEY"}
