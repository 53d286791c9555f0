"""Environment images share the layer of the requirements most environments pin alike (PyTorch,
NumPy: rebench/images/wheels.py), so that a second environment's build reuses the first one's
install from the engine's cache and both images hold it once on disk. Real engine, real builds
of two copies of the counter fixture that both require NumPy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _shared_layer(engine: object, tag: str) -> str:
    """The id of the image's layer that ran the shared requirements' install."""
    history = engine.client.api.history(tag)  # type: ignore[attr-defined]
    (step,) = [h for h in history
               if "pip install" in h["CreatedBy"] and "rebench-shared-requirements" in h["CreatedBy"]]
    return str(step["Id"])


def test_two_environments_pinning_numpy_build_its_layer_once_and_share_it(fixture_envs: Path) -> None:
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.images import build_environment_image
    from rebench.images.wheels import shared_requirements

    engine = docker_engine()
    base_image(engine)
    twin = fixture_envs / "counter_twin"
    shutil.copytree(fixture_envs / "counter", twin)
    toml = twin / "environment.toml"
    toml.write_text(toml.read_text().replace('name = "counter"', 'name = "counter_twin"', 1))
    (fixture_envs / "counter" / "requirements.txt").write_text("numpy\nPyYAML\n")
    (twin / "requirements.txt").write_text("numpy   # written differently, the same requirement\n")
    registry = EnvironmentRegistry(fixture_envs)
    counter, other = registry.get("counter"), registry.get("counter_twin")
    assert shared_requirements(counter, "tiny") == shared_requirements(other, "tiny") == b"numpy\n"

    first = build_environment_image(counter, "tiny", engine=engine)
    logged: list[str] = []
    second = build_environment_image(other, "tiny", engine=engine, log=logged.append)
    assert first != second
    assert _shared_layer(engine, first) == _shared_layer(engine, second)
    # NumPy in the twin came from the shared layer; PyYAML, the counter's alone, is not there
    output = engine.client.containers.run(second, ["python3", "-c", "import numpy; print(numpy.__name__)"],
                                          remove=True, network_mode="none")
    assert output.decode().strip() == "numpy"
    with pytest.raises(Exception, match="ModuleNotFoundError"):
        engine.client.containers.run(second, ["python3", "-c", "import yaml"], remove=True, network_mode="none",
                                     stderr=True)
    shown = engine.client.containers.run(first, ["python3", "-c", "import numpy, yaml; print('both')"],
                                         remove=True, network_mode="none")
    assert shown.decode().strip() == "both"
