"""Shared pieces for the model and modular-agent tests: a fake server, keys, a price table."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fake_model_server import FakeModelServer

OPENAI_TEST_KEY = "sk-test-openai-7f3a9c1e5b2d4f60a8e1"
ANTHROPIC_TEST_KEY = "sk-ant-test-2b8e6d0c4a9f1e7d3c5b"

TEST_PRICES = """
[models."openai-compatible/scripted"]
input_per_mtok = 1000.0
output_per_mtok = 2000.0
cached_input_per_mtok = 100.0
context_window = 50000

[models."openai/scripted"]
input_per_mtok = 1000.0
output_per_mtok = 2000.0
cached_input_per_mtok = 100.0
context_window = 50000

[models."anthropic/scripted"]
input_per_mtok = 1000.0
output_per_mtok = 2000.0
cached_input_per_mtok = 100.0
context_window = 50000
"""
"""Absurd prices so that a few scripted calls cost whole dollars (for cost-limit tests)."""


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def provider_keys(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_TEST_KEY)
    return {"OPENAI_API_KEY": OPENAI_TEST_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_TEST_KEY}


@pytest.fixture
def prices_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "prices.toml"
    path.write_text(TEST_PRICES)
    monkeypatch.setenv("REBENCH_PRICES", str(path))
    return path


def model_for(provider: str, server: FakeModelServer) -> dict[str, Any]:
    """`model` and `base_url` for an AgentConfig that reaches the fake server."""
    if provider == "anthropic":
        return {"model": "anthropic/scripted", "base_url": server.url}
    if provider == "openai":
        return {"model": "openai/scripted", "base_url": server.openai_url}
    return {"model": "openai-compatible/scripted", "base_url": server.openai_url}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@contextmanager
def replay_attempts_then_server(root: Path) -> Iterator[tuple[Path, FakeModelServer]]:
    """Under `root`: a copy of the fixture environments and `rebench.db` with two replay attempts of
    `counter` (a valid, an invalid and a valid score call). Yields the database and a fake model
    server, with the environments, prices and key set, for the LLM agent's campaign the caller adds."""
    import yaml

    from rebench import api
    from tests.conftest import FIXTURE_ENVS

    shutil.copytree(FIXTURE_ENVS, root / "envs")
    db = root / "rebench.db"
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "6"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "oops"}}, {"score": {}},
        {"write_file": {"path": "value.txt", "content": "4"}}, {"score": {}}, {"submit": None},
    ]}))
    (root / "prices.toml").write_text(TEST_PRICES)
    with pytest.MonkeyPatch.context() as patch, FakeModelServer() as server:
        patch.setenv("REBENCH_ENVIRONMENTS", str(root / "envs"))
        patch.setenv("REBENCH_PRICES", str(root / "prices.toml"))
        patch.setenv("OPENAI_API_KEY", OPENAI_TEST_KEY)
        api.run_campaign(api.CampaignSpec(environments=["counter"], budget_s="1m", k=2, backend="local",
                                          agent=api.AgentConfig(name="replay", args={"script": str(script)})), db=db)
        yield db, server
