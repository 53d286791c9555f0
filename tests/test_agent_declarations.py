"""Installed agents are declared in TOML (rebench.agents.declared): the shipped ones load, a user adds one
through $REBENCH_AGENT_DECLARATIONS without touching rebench, and a bad file is a one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig
from rebench.agents.declared import DECLARATIONS_ENV, declared_agents, load_declaration
from rebench.agents.installed import InstalledAgent
from rebench.agents.registry import available_agents, load_agent
from rebench.errors import RebenchError

MINI = """
description = "mini-swe-agent"
api = "openai"
command = "mini --task \\"$(cat {instructions_file})\\" --model {model}"
[install]
pip = ["mini-swe-agent==2.4.6"]
[env]
OPENAI_BASE_URL = "{gateway_url}/v1"
OPENAI_API_KEY = "{token}"
"""


def test_the_shipped_agents_are_pinned_and_point_at_the_gateway() -> None:
    found = declared_agents()
    claude, codex = load_declaration(found["claude-code"]), load_declaration(found["codex"])
    assert claude.install.npm == ["@anthropic-ai/claude-code@2.1.332"] and claude.api == "anthropic"
    assert claude.env["ANTHROPIC_BASE_URL"] == "{gateway_url}" and claude.env["ANTHROPIC_API_KEY"] == "{token}"
    assert "--dangerously-skip-permissions" in claude.command and "--max-turns" in claude.command
    assert codex.install.npm == ["@openai/codex@0.171.0"] and "codex exec" in codex.command
    assert 'base_url = "{gateway_url}/v1"' in codex.files[".codex/config.toml"]


def test_a_user_declares_an_agent_without_touching_rebench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mini.toml").write_text(MINI)
    monkeypatch.setenv(DECLARATIONS_ENV, str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert available_agents()["mini"] == str(tmp_path / "mini.toml")
    agent = load_agent(AgentConfig(name="mini", model="openai/gpt-test"))
    assert isinstance(agent, InstalledAgent) and agent.declaration.install.pip == ["mini-swe-agent==2.4.6"]
    with pytest.raises(RebenchError, match="--backend docker"):
        agent.check("local")


@pytest.mark.parametrize(("text", "message"), [
    (MINI.replace('"mini-swe-agent==2.4.6"', '"mini-swe-agent"'), "is not pinned"),
    (MINI.replace('api = "openai"', 'api = "gemini"'), "api"),
    ('session_logs = ["../../etc"]\n' + MINI, "inside the agent's home"),
])
def test_a_bad_declaration_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "mini.toml").write_text(text)
    with pytest.raises(RebenchError, match=message) as raised:
        load_declaration(tmp_path / "mini.toml")
    assert "\n" not in str(raised.value) and "mini.toml" in str(raised.value)


def test_a_declaration_may_not_take_another_agents_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "modular.toml").write_text(MINI)
    monkeypatch.setenv(DECLARATIONS_ENV, str(tmp_path))
    with pytest.raises(RebenchError, match="modular"):
        available_agents()
    (tmp_path / "modular.toml").unlink()
    (tmp_path / "codex.toml").write_text(MINI)
    with pytest.raises(RebenchError, match="two agent declarations named 'codex'"):
        declared_agents()


def test_unknown_agent_args_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    agent = load_agent(AgentConfig(name="claude-code", model="anthropic/m", args={"max_turns": "5"}))
    assert isinstance(agent, InstalledAgent) and agent.args["max_turns"] == "5"
    with pytest.raises(RebenchError, match="unknown --agent-arg 'turns'"):
        load_agent(AgentConfig(name="claude-code", model="anthropic/m", args={"turns": "5"}))
