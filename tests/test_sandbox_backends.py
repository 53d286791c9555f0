"""Sandbox backends found through the real `rebench.sandboxes` entry points: rebench's own
two from its installed metadata, and a third party's from an installed-looking
distribution on sys.path, with no edit to rebench."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.sandbox import local
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.factory import backend_names, load_backend, resolve_backend
from rebench.sandboxes import create_sandbox

from .plugin_support import install_distribution

Installer = Callable[[dict[str, str]], None]
PLUGIN_MODULE = """
from rebench.sandbox.base import SandboxBackend


class Made:
    def __init__(self, spec, env):
        self.spec, self.env = spec, env


BACKEND = SandboxBackend(create=Made, available=lambda: False)
NOT_A_BACKEND = object()
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Installer:
    """Install a package declaring `backends` (name -> attribute of its module) on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return lambda backends: install_distribution(
        tmp_path / "site", "far_sandboxes", "far_sandboxes", PLUGIN_MODULE, "rebench.sandboxes", backends
    )


def _spec() -> SandboxSpec:
    return SandboxSpec(attempt_id=1, environment="counter", profile="tiny")


def test_an_unknown_backend_is_one_line_naming_the_installed_ones(install: Installer) -> None:
    install({"far": "BACKEND"})
    with pytest.raises(RebenchError) as info:
        resolve_backend("k8s")
    assert str(info.value) == "unknown backend 'k8s'; allowed: docker, far, local"
    with pytest.raises(RebenchError, match="unknown backend 'k8s'"):
        create_sandbox("k8s", _spec(), None)  # type: ignore[arg-type]


def test_a_third_party_backend_is_created_through_its_entry_point(install: Installer) -> None:
    install({"far": "BACKEND", "broken": "NOT_A_BACKEND"})
    assert resolve_backend("far") == ("far", None)
    made = create_sandbox("far", _spec(), None)  # type: ignore[arg-type]
    assert type(made).__name__ == "Made" and made.spec == _spec()  # type: ignore[attr-defined]
    with pytest.raises(RebenchError, match=r"'broken' .* is not a SandboxBackend"):
        create_sandbox("broken", _spec(), None)  # type: ignore[arg-type]


def test_rebench_s_own_backends_come_from_its_entry_points(fixture_envs: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Creating on `local` reaches the local backend's own factory: an environment that was
    never built (in a cache of its own) is its one-line error (building one would take a minute)."""
    monkeypatch.setenv("REBENCH_CACHE", str(tmp_path / "cache"))
    assert {"docker", "local"} <= set(backend_names())
    assert load_backend("local") is local.BACKEND
    env = EnvironmentRegistry(fixture_envs).get("counter")
    with pytest.raises(RebenchError, match="environment 'counter' is not built"):
        create_sandbox("local", _spec(), env)


def test_without_an_engine_the_default_is_local_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    backend, warning = resolve_backend(None)
    assert backend == "local" and warning is not None and "no Docker engine answered" in warning


@pytest.mark.docker
def test_with_an_engine_the_default_is_docker() -> None:
    from .docker_support import docker_engine

    docker_engine()  # skips when no engine answers
    assert resolve_backend(None) == ("docker", None)
