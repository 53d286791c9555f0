"""An installed agent is an adversary like any other (rebench.agents.installed).

- Its image layer leaves nothing agent-writable that root or the scorer executes (walked as the agent).
- Its session logs are copied out by the harness (root, through the engine's archive API) after it
  ended: an agent that turns a folder on the way to them into a link to root's files
  (/opt/rebench/env: the environment's protected files and scoring code) must not get those files
  copied into the attempt's records. Seen to succeed (the protected files landed beside the snapshot)
  before the collection refused paths that are not what they say.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.fake_model_server import FakeModelServer

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.adversarial]

KEY = "sk-provider-test-adversarial"
DECLARATION = """
description = "an agent that links its log folder to root's files, then exits"
api = "anthropic"
session_logs = ["logs/env"]
command = "rm -rf ~/logs; ln -s /opt/rebench ~/logs; ls -la ~/logs/ > /dev/null 2>&1; true"

[install]
"""


def test_session_log_collection_does_not_follow_the_agents_links(tmp_path: Path,
                                                                 db_path: Path) -> None:
    declarations = tmp_path / "agents"
    declarations.mkdir()
    (declarations / "linker.toml").write_text(DECLARATION)
    with FakeModelServer([], require_key=KEY) as server:
        result = run_cli("run", "--env", "triton_cumsum", "--agent", "linker", "--model", "anthropic/test-model",
                         "--base-url", server.url, "--profile", "tiny", "--budget", "5m", "--backend", "docker",
                         "--final-rule", "best", "--no-calibrate",
                         "--db", str(db_path),
                         env={"ANTHROPIC_API_KEY": KEY, "REBENCH_AGENT_DECLARATIONS": str(declarations)},
                         timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db_path) as connection:
        (snapshot,), = connection.execute("select snapshot_path from attempts").fetchall()
    base = Path(snapshot).parent if Path(snapshot).name == "final" else Path(snapshot)
    agent_dir = base.with_name(base.name + "-agent")
    copied = sorted(str(p.relative_to(agent_dir)) for p in agent_dir.rglob("*"))
    assert copied == [], copied


def test_the_installed_agent_layer_leaves_nothing_agent_writable() -> None:
    from rebench.agents.declared import declared_agents, load_declaration
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.images.agent_layer import build_agent_image
    from rebench.images.build import build_environment_image
    from rebench.images.writable import agent_writable
    from tests.docker_support import docker_engine, run, started_sandbox

    engine = docker_engine()
    env_image = build_environment_image(EnvironmentRegistry().get("triton_cumsum"), "tiny", engine=engine)
    for name in ("claude-code", "codex"):
        image = build_agent_image(engine, env_image, load_declaration(declared_agents()[name]))

        async def body(image: str = image) -> list[str]:
            async with started_sandbox(image) as sb:
                return await agent_writable(sb)

        assert run(body()) == [], name
