"""Shared pieces for the model and modular-agent tests: a fake server, keys, a price table."""

from __future__ import annotations

from collections.abc import Iterator
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
