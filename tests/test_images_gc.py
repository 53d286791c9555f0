"""`rebench images gc` on a real engine: three generations of a fixture environment's image."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from rebench.images.naming import LABEL_AGENT_BASE, LABEL_KIND

from .conftest import run_cli
from .docker_support import base_image, docker_engine

pytestmark = pytest.mark.docker


def _generation(engine: object, base: str, name: str, generation: int, folder: Path) -> str:
    """An image labelled as rebench labels an environment image, with 1 MiB of its own bytes. The fixture's
    name is in the RUN line: the engine's build cache would otherwise give another test's generation the
    same layer, which then is not this image's own (gc rightly counts no bytes freed for it)."""
    context = folder / f"gen{generation}"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {base}\nRUN head -c 1048576 /dev/urandom > /generation-{generation}-{name}\n"
        f"LABEL rebench.environment={name} rebench.profile=tiny\n")
    tag = f"rebench/env-{name}:tiny-gen{generation}"
    engine.build(context, "Dockerfile", tag, {}, {LABEL_KIND: "environment"})  # type: ignore[attr-defined]
    time.sleep(1.1)  # the engine's creation times have a resolution of a second at worst
    return tag


def test_images_gc_removes_superseded_and_keeps_newest_and_used(tmp_path: Path) -> None:
    """Generation 1 is superseded but a stopped container was made from it; generation 2 is superseded
    and unused; generation 3 is the newest. Only generation 2 goes, and its bytes are reported freed."""
    engine = docker_engine()
    base = base_image(engine)
    name = f"gcfixture{uuid.uuid4().hex[:8]}"
    tags = [_generation(engine, base, name, n, tmp_path) for n in (1, 2, 3)]
    container = engine.client.containers.create(tags[0], ["true"])
    try:
        result = run_cli("images", "gc", "--env", name, "--db", str(tmp_path / "absent.db"), "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert [entry["tags"] for entry in report["removed"]] == [[tags[1]]]
        assert [entry["tags"] for entry in report["kept_in_use"]] == [[tags[0]]]
        assert [entry["tags"] for entry in report["kept_newest"]] == [[tags[2]]]
        assert report["freed_bytes"] >= 1024 * 1024
        assert engine.image_id(tags[1]) is None
        assert engine.image_id(tags[0]) and engine.image_id(tags[2])
        assert not (tmp_path / "absent.db").exists(), "gc created a database"
    finally:
        container.remove(force=True)
        for tag in tags:
            engine.remove_image(tag)


def test_images_gc_keeps_what_a_resumable_attempt_will_run(tmp_path: Path) -> None:
    """An image named in `keep` (the current image of an environment with an interrupted attempt) stays,
    though it is superseded and no container uses it."""
    from rebench.images.gc import prune_images

    engine = docker_engine()
    base = base_image(engine)
    name = f"gcfixture{uuid.uuid4().hex[:8]}"
    tags = [_generation(engine, base, name, n, tmp_path) for n in (1, 2, 3)]
    try:
        report = prune_images(engine, keep=[tags[0]], environments=[name])
        assert [entry.tags for entry in report.kept_in_use] == [[tags[0]]]
        assert [entry.tags for entry in report.removed] == [[tags[1]]]
    finally:
        for tag in tags:
            engine.remove_image(tag)


def test_disk_warning_names_the_fill_and_the_command() -> None:
    """The warning `rebench run` prints on the Docker backend: silent below the threshold, one line above."""
    from rebench.images.gc import engine_disk_warning

    engine = docker_engine()
    assert engine_disk_warning(engine, fraction=1.0) is None
    line = engine_disk_warning(engine, fraction=0.0)
    assert line is not None and "\n" not in line
    assert "full" in line and "rebench images gc" in line


def _agent_layer(engine: object, environment_image: str, name: str, folder: Path) -> str:
    """An image labelled as rebench labels an installed agent's layer on `environment_image`."""
    context = folder / f"agent-{environment_image.rsplit('-', 1)[-1]}"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {environment_image}\nRUN head -c 1024 /dev/urandom > /agent\n")
    tag = f"rebench/agent-{name}:{environment_image.rsplit(':', 1)[-1]}"
    engine.build(context, "Dockerfile", tag, {},  # type: ignore[attr-defined]
                 {LABEL_KIND: "agent", LABEL_AGENT_BASE: environment_image})
    time.sleep(1.1)
    return tag


def test_images_gc_removes_an_agent_layer_with_its_superseded_environment_image(tmp_path: Path) -> None:
    """An installed agent's image on a superseded environment image goes first, so that environment
    image can go too (the engine refuses to remove an image another is built on); the agent's image on
    the newest environment image stays."""
    engine = docker_engine()
    base = base_image(engine)
    name = f"gcfixture{uuid.uuid4().hex[:8]}"
    tags = [_generation(engine, base, name, n, tmp_path) for n in (1, 2)]
    agents = [_agent_layer(engine, tag, name, tmp_path) for tag in tags]
    try:
        result = run_cli("images", "gc", "--env", name, "--db", str(tmp_path / "absent.db"), "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert sorted(tag for entry in report["removed"] for tag in entry["tags"]) == sorted([tags[0], agents[0]])
        assert report["refused"] == []
        assert sorted(tag for entry in report["kept_newest"] for tag in entry["tags"]) == sorted([tags[1], agents[1]])
        assert engine.image_id(tags[0]) is None and engine.image_id(agents[0]) is None
        # the environment image's 1 MiB layer was shared with the agent's image until that went first
        assert report["freed_bytes"] >= 1024 * 1024 + 1024, report["freed_bytes"]
        assert engine.image_id(tags[1]) and engine.image_id(agents[1])
    finally:
        for tag in agents + tags:
            engine.remove_image(tag)


def test_image_bytes_wait_out_another_disk_usage_walk() -> None:
    """The engine refuses a second `system df` while one is running (a 500, not a queue); four asked
    at once all get the size, as two gc runs (or a user's `docker system df`) at once would."""
    engine = docker_engine()
    results: list[object] = []

    def ask() -> None:
        try:
            results.append(engine.unique_image_bytes())
        except Exception as error:  # the refusal is what the test looks for
            results.append(error)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [type(r) for r in results] == [dict] * 4, results
    assert all(r and all(v >= 0 for v in r.values()) for r in results), results  # type: ignore[union-attr]


def test_freed_bytes_are_the_removed_images_own_while_another_build_runs(tmp_path: Path) -> None:
    """Another process builds an image at the moment gc removes one (as a parallel `rebench run` does):
    the freed bytes are still the removed image's own 1 MiB, not the engine's total before less after
    (which that 2 MiB build made negative, read as 0)."""
    from rebench.images.gc import prune_images

    engine = docker_engine()
    base = base_image(engine)
    name = f"gcfixture{uuid.uuid4().hex[:8]}"
    tags = [_generation(engine, base, name, n, tmp_path) for n in (1, 2)]
    other = tmp_path / "other"
    other.mkdir()
    (other / "Dockerfile").write_text(f"FROM {base}\nRUN head -c 2097152 /dev/urandom > /other-{name}\n")
    other_tag = f"rebench-test/gc-other-{uuid.uuid4().hex[:8]}:latest"
    real_remove = engine.remove_image

    def remove_while_another_builds(ref: str) -> bool:
        engine.build(other, "Dockerfile", other_tag, {}, {})
        return real_remove(ref)

    engine.remove_image = remove_while_another_builds  # type: ignore[method-assign]
    try:
        report = prune_images(engine, environments=[name])
        assert [entry.tags for entry in report.removed] == [[tags[0]]]
        assert 1024 * 1024 <= report.freed_bytes < 2 * 1024 * 1024, report.freed_bytes
    finally:
        engine.remove_image = real_remove  # type: ignore[method-assign]
        for tag in [*tags, other_tag]:
            engine.remove_image(tag)
