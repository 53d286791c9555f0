"""A built wheel carries the environments and Dockerfiles, and installs no stray top-level package;
the lookup of both folders prefers an explicit setting, then the checkout, then the bundled copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path, PurePosixPath

import pytest

from rebench import resources
from rebench.environments.registry import Environment, EnvironmentRegistry
from tests.conftest import REPO

BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "rebench", "environments", "dockerfiles")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the checkout's sources (so the build leaves nothing in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        path = REPO / name
        if not path.exists():
            continue
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    # this virtualenv's setuptools when it builds wheels itself (>= 70.1, seconds faster); else pip's isolated build
    try:
        own = tuple(int(part) for part in version("setuptools").split(".")[:2]) >= (70, 1)
    except (PackageNotFoundError, ValueError):
        own = False
    isolation = ["--no-build-isolation"] if own else []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(out), str(source)],
                   check=True, timeout=300)
    (built,) = out.glob("rebench-*.whl")
    return built


@pytest.mark.slow
def test_wheel_bundles_environments_and_dockerfiles(wheel: Path) -> None:
    names = [PurePosixPath(n) for n in zipfile.ZipFile(wheel).namelist()]
    bundled = PurePosixPath("rebench", "_bundled")
    environments = {p.parts[3] for p in names if p.parts[:3] == (*bundled.parts, "environments")}
    assert environments == set(EnvironmentRegistry(REPO / "environments").names())
    for env in environments:
        assert bundled / "environments" / env / "environment.toml" in names
        assert bundled / "environments" / env / "scoring" / "score.py" in names
    dockerfiles = {p.name for p in names if p.parent == bundled / "dockerfiles"}
    assert dockerfiles == {p.name for p in (REPO / "dockerfiles").glob("*.Dockerfile")}
    under_bundle = [p for p in names if p.parts[:2] == bundled.parts]
    assert not [p for p in under_bundle if {"tests", "__pycache__", ".pytest_cache"} & set(p.parts)]
    assert not [p for p in under_bundle if p.suffix == ".pyc"]
    top_level = {p.parts[0] for p in names}
    assert "agents" not in top_level
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"rebench"}
    assert PurePosixPath("rebench", "agents", "reference", "agent.py") in names
    # What open_ssh copies into a human attempt's container, and the exec server it runs.
    for script in ("gate.py", "relay.py", "session.py", "task.py"):
        assert PurePosixPath("rebench", "sandbox", "human", script) in names
    assert PurePosixPath("rebench", "sandbox", "exec_server.py") in names


@pytest.mark.slow
def test_bundled_environment_hashes_like_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """Same content hash, so a wheel install reuses the assets and images a checkout built."""
    zipfile.ZipFile(wheel).extractall(tmp_path)
    bundled = EnvironmentRegistry(tmp_path / "rebench" / "_bundled" / "environments")
    checkout = EnvironmentRegistry(REPO / "environments")
    for name in checkout.names():
        ours: Environment = bundled.get(name)
        assert ours.content_hash("tiny") == checkout.get(name).content_hash("tiny"), name


@pytest.mark.slow
def test_installed_wheel_finds_its_bundled_folders_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    """The wheel installed (not editable) and run from a folder that is not the checkout."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("REBENCH_ENVIRONMENTS", "REBENCH_DOCKERFILES")}
    env.update(PYTHONPATH=str(site), PYTHONSAFEPATH="1", COLUMNS="300")
    probe = ("import json, rebench\n"
             "from rebench.resources import dockerfiles_dir, environments_dir\n"
             "print(json.dumps([rebench.__file__, str(environments_dir()), str(dockerfiles_dir())]))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout
    package, environments, dockerfiles = (Path(p) for p in json.loads(out))
    assert package == site / "rebench" / "__init__.py"
    assert environments == site / "rebench" / "_bundled" / "environments"
    assert (dockerfiles / "env.Dockerfile").read_bytes() == (REPO / "dockerfiles" / "env.Dockerfile").read_bytes()
    listed = subprocess.run([sys.executable, "-m", "rebench.cli.app", "envs", "list", "--json"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, check=True).stdout
    assert {row["environment"] for row in json.loads(listed)} == set(EnvironmentRegistry(REPO / "environments").names())


def _layout(root: Path, *, checkout: bool, bundled: bool) -> Path:
    """A package folder `root/rebench` as an install or a checkout would have it."""
    package = root / "rebench"
    package.mkdir(parents=True)
    if checkout:
        (root / "pyproject.toml").write_text("[project]\nname = 'rebench'\n")
        (root / "environments").mkdir()
        (root / "dockerfiles").mkdir()
    if bundled:
        (package / "_bundled" / "environments").mkdir(parents=True)
        (package / "_bundled" / "dockerfiles").mkdir()
    return package


@pytest.mark.parametrize("checkout", [True, False])
def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkout: bool) -> None:
    package = _layout(tmp_path, checkout=checkout, bundled=True)
    monkeypatch.setattr(resources, "PACKAGE_DIR", package)
    monkeypatch.delenv("REBENCH_ENVIRONMENTS", raising=False)
    monkeypatch.delenv("REBENCH_DOCKERFILES", raising=False)
    expected = tmp_path if checkout else package / "_bundled"
    assert resources.environments_dir() == expected / "environments"
    assert resources.dockerfiles_dir() == expected / "dockerfiles"
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(tmp_path / "mine"))
    monkeypatch.setenv("REBENCH_DOCKERFILES", str(tmp_path / "my-dockerfiles"))
    assert resources.environments_dir() == tmp_path / "mine"
    assert resources.dockerfiles_dir() == tmp_path / "my-dockerfiles"


def test_site_packages_folder_named_environments_is_not_a_checkout(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another distribution's top-level `environments` package beside an installed rebench is not ours."""
    package = _layout(tmp_path, checkout=False, bundled=True)
    (tmp_path / "environments").mkdir()
    monkeypatch.setattr(resources, "PACKAGE_DIR", package)
    monkeypatch.delenv("REBENCH_ENVIRONMENTS", raising=False)
    assert resources.environments_dir() == package / "_bundled" / "environments"
