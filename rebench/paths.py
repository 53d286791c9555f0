"""Where rebench keeps caches (virtualenvs, built assets) and attempt working folders."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`REBENCH_CACHE`, else `~/.cache/rebench`: built assets and virtualenvs, keyed by content hash."""
    override = os.environ.get("REBENCH_CACHE")
    path = Path(override) if override else Path.home() / ".cache" / "rebench"
    path.mkdir(parents=True, exist_ok=True)
    return path
