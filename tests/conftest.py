"""Shared fixtures: a throwaway database, cache and environments folder per test session, and
the kernel environment's calibration, measured once per session."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class KernelRun:
    """The README's main job on a fresh database: `rebench run` calibrates this machine first."""

    result: subprocess.CompletedProcess[str]
    db: Path


@pytest.fixture(scope="session")
def kernel_first_run(tmp_path_factory: pytest.TempPathFactory) -> KernelRun:
    """One reference attempt on the kernel environment's tiny profile (local backend) on a fresh
    database, which makes `rebench run` measure the anchors first. Measuring them takes six score
    calls, so it happens once per session: tests/test_kernel_campaign.py checks this run, and
    every other test that needs calibrated anchors copies them (`calibrated_kernel_db`)."""
    db = tmp_path_factory.mktemp("kernel") / "kernel.db"
    result = run_cli("run", "--env", "triton_cumsum", "--agent", "reference", "--profile", "tiny",
                     "--budget", "10m", "-k", "1", "--backend", "local", "--db", str(db), timeout=900,
                     env={"REBENCH_ENVIRONMENTS": str(REPO / "environments")})
    assert result.returncode == 0, result.stderr
    return KernelRun(result, db)


@pytest.fixture
def calibrated_kernel_db(tmp_path: Path, kernel_first_run: KernelRun) -> Path:
    """A fresh database holding only this session's calibration of triton_cumsum (tiny), saved
    through the product's own `save_calibration` from the measured samples."""
    from rebench.calibration import save_calibration
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.store import Store

    with sqlite3.connect(kernel_first_run.db) as connection:
        (samples,), = connection.execute(
            "select samples from calibrations where environment = 'triton_cumsum' and profile = 'tiny'").fetchall()
    measured = json.loads(samples)
    db = tmp_path / "calibrated.db"
    store = Store(db)
    try:
        env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
        save_calibration(store, env, "tiny", measured["start"], measured["reference"])
    finally:
        store.close()
    return db
