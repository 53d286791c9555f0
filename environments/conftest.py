"""Shared fixtures for the environments' own tests: build tiny assets once per content
hash, lay an environment out like a sandbox, score through rebench's scoring helper."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "_common"))

import sandbox_layout


@pytest.fixture
def layout():
    """The sandbox_layout module (build, lay out, score, normalize)."""
    return sandbox_layout
