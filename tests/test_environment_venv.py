"""An environment's virtualenv sees the harness's packages, also when the harness runs in a virtualenv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rebench.environments.build import local_python
from rebench.environments.registry import EnvironmentRegistry


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the harness is not running in a virtualenv")
def test_environment_venv_imports_packages_of_the_harness_venv(fixture_envs: Path) -> None:
    """CI runs the harness from a fresh virtualenv: environments must not reinstall what it has (torch)."""
    env = EnvironmentRegistry(fixture_envs).get("counter")
    python = local_python(env, "tiny")
    probe = "import typer, rebench, sys; print(sys.prefix)"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == python.parent.parent
