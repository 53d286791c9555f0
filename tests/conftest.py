"""Shared fixtures: a throwaway database, cache and environments folder per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE_ENVS = Path(__file__).parent / "fixtures" / "envs"


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep test virtualenvs, assets and attempt folders out of the user's cache."""
    cache = Path(os.environ.get("REBENCH_TEST_CACHE") or tmp_path_factory.mktemp("rebench-cache"))
    previous = os.environ.get("REBENCH_CACHE")
    os.environ["REBENCH_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("REBENCH_CACHE", None)
    else:
        os.environ["REBENCH_CACHE"] = previous


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "rebench.db"


@pytest.fixture
def fixture_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the test-fixture environments, selected through REBENCH_ENVIRONMENTS."""
    target = tmp_path / "envs"
    shutil.copytree(FIXTURE_ENVS, target)
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(target))
    return target


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `rebench` command line in a subprocess."""
    full_env = {**os.environ, **(env or {}), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "rebench.cli.app", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd or REPO)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the real CLI entry point in this process: (exit status, stdout, stderr)."""
    from rebench.cli.app import main

    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err
