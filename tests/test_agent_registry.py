"""Agent plugins found through a real `rebench.agents` entry point (an installed-looking distribution on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig
from rebench.agents.registry import available_agents, load_agent
from rebench.errors import RebenchError
from rebench.store import Attempt, Campaign, Store

from .conftest import run_cli
from .plugin_support import install_distribution

PLUGIN_MODULE = """
class EchoAgent:
    def __init__(self, name):
        self.name = name

    async def run(self, ctx):
        await ctx.submit()


def create_agent(config):
    return EchoAgent(config.name)
"""


def _install_plugin(site: Path, distribution: str, agents: dict[str, str]) -> None:
    """Lay out what `pip install` would leave: a module plus a dist-info folder with entry_points.txt."""
    install_distribution(site, distribution, f"{distribution}_agents", PLUGIN_MODULE, "rebench.agents", agents)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_plugin_with_its_own_name_is_found_and_loaded(site: Path) -> None:
    _install_plugin(site, "echo_plugin", {"echo": "create_agent"})
    assert available_agents()["echo"] == "echo_plugin_agents:create_agent"
    assert {"modular", "reference", "replay"} <= set(available_agents())
    agent = load_agent(AgentConfig(name="echo"))
    assert type(agent).__name__ == "EchoAgent" and agent.name == "echo"  # type: ignore[attr-defined]


@pytest.mark.parametrize("asked", ["reference", "modular", "echo"])
def test_plugin_named_like_a_builtin_is_an_error(site: Path, asked: str) -> None:
    """Whatever agent is asked for: with the clash installed, which `reference` runs would be a guess."""
    _install_plugin(site, "clash_plugin", {"reference": "create_agent", "echo": "create_agent"})
    with pytest.raises(RebenchError) as info:
        load_agent(AgentConfig(name=asked))
    message = str(info.value)
    assert "clash_plugin_agents:create_agent" in message  # the plugin's entry point
    assert "rebench.agents.reference.agent:create_agent" in message  # the built-in it collides with
    assert "'clash_plugin'" in message and "\n" not in message
    with pytest.raises(RebenchError, match="has the name of the built-in agent 'reference'"):
        available_agents()


def test_two_plugins_with_one_name_is_an_error(site: Path) -> None:
    _install_plugin(site, "first_plugin", {"echo": "create_agent"})
    _install_plugin(site, "second_plugin", {"echo": "create_agent"})
    with pytest.raises(RebenchError, match="registered twice") as info:
        load_agent(AgentConfig(name="echo"))
    assert "first_plugin_agents:create_agent" in str(info.value)
    assert "second_plugin_agents:create_agent" in str(info.value)


def test_clash_stops_rebench_run_before_anything_is_written(tmp_path: Path, fixture_envs: Path) -> None:
    """Through the real CLI in a subprocess: one line on stderr, exit 2, no database rows."""
    site = tmp_path / "site"
    _install_plugin(site, "clash_plugin", {"reference": "create_agent"})
    db = tmp_path / "r.db"
    python_path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    result = run_cli(
        "run",
        "--env",
        "counter",
        "--agent",
        "reference",
        "--budget",
        "1m",
        "--backend",
        "local",
        "--db",
        str(db),
        env={"PYTHONPATH": python_path, "REBENCH_ENVIRONMENTS": str(fixture_envs)},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: agent plugin 'reference'")
    assert "clash_plugin_agents:create_agent" in lines[0] and "rebench.agents.reference.agent:create_agent" in lines[0]
    if db.exists():
        store = Store(db)
        with store.session() as session:
            assert session.query(Campaign).count() == 0 and session.query(Attempt).count() == 0
        store.close()
