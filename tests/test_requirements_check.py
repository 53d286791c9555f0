"""An environment's virtualenv skips pip when every requirement is installed already
(rebench/environments/requirements_check.py), and only then: a missing package, a version the pin
does not allow, a missing dependency (of an extra too) or a line pip alone understands sends the
build to pip as before. Installed distributions are made up as .dist-info folders on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rebench.environments.build import local_python
from rebench.environments.registry import EnvironmentRegistry

CHECK = Path(__file__).resolve().parents[1] / "rebench" / "environments" / "requirements_check.py"


def dist(site: Path, name: str, version: str, *requires: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    dist(folder, "rbfake", "1.0", "filelock", 'rbmissing; extra == "more"')
    dist(folder, "rbbroken", "1.0", "rbmissing>=1")
    dist(folder, "rbold", "1.0", "rbfake<1")  # needs an older rbfake than the one installed
    return folder


def installed(site: Path, tmp_path: Path, text: str) -> bool:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(text)
    done = subprocess.run([sys.executable, str(CHECK), str(requirements)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(site)}, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("rbfake\n# a comment\n\nfilelock  # the lock\n", True),
    ("rbfake==1.0\n", True),
    ('rbmissing; python_version < "3"\nrbfake\n', True),  # a marker that does not apply here
    ("rbfake>=2\n", False),  # installed, but not a version the pin allows
    ("rbmissing\n", False),
    ("rbbroken\n", False),  # installed, but a dependency of it is not
    ("rbfake[more]\n", False),  # the extra's dependency is not installed
    ("rbfake\nrbfake>=2\n", False),  # a second line for a package already checked is checked too
    ("rbfake\nrbold\n", False),  # so is a dependency's pin on a package already checked
    ("--index-url https://example.invalid/simple\nrbfake\n", False),  # options are pip's
    ("rbfake @ https://example.invalid/rbfake-1.0.tar.gz\n", False),
    ("./local/rbfake\n", False),
    ("rbfake >>> 1\n", False),  # not a requirement pip could read either: pip reports it
])
def test_only_a_file_of_installed_requirements_skips_pip(site: Path, tmp_path: Path, text: str,
                                                         expected: bool) -> None:
    assert installed(site, tmp_path, text) is expected


def test_a_virtualenv_whose_requirements_are_installed_is_built_without_pip(
        fixture_envs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBENCH_CACHE", str(tmp_path / "cache"))
    (fixture_envs / "counter" / "requirements.txt").write_text("filelock\nPyYAML>=6\n")
    env = EnvironmentRegistry(fixture_envs).get("counter")
    said: list[str] = []
    python = local_python(env, "tiny", log=said.append)
    assert any("installed already" in line for line in said), said
    assert not any(line.startswith("installing") for line in said), said
    done = subprocess.run([str(python), "-c", "import filelock, yaml"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
