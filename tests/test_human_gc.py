"""`rebench gc` never removes a human attempt's container (labelled LABEL_HUMAN), not even with
`--all`, and says so, against a real Docker engine with real containers and volumes.

The engine is scoped to this test's containers (a label of its own on everything it creates): `gc --all`
on the shared engine would also remove other test runs' attempts in progress. Listing and removal
are the real engine's."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from rebench.images import collect_garbage
from rebench.sandbox.docker import LABEL_ATTEMPT, LABEL_HUMAN, LABEL_OWNER, DockerEngine

from .conftest import run_main
from .docker_support import base_image, docker_engine

pytestmark = pytest.mark.docker

SCOPE = "rebench.test-scope"


class ScopedEngine(DockerEngine):
    """The real engine, seeing only containers and volumes that carry this test's scope label."""

    scope: str = ""

    def containers(self, label: str = LABEL_ATTEMPT) -> list[tuple[str, str, str, dict[str, str]]]:
        return [c for c in super().containers(label) if c[3].get(SCOPE) == self.scope]

    def volumes(self, label: str = LABEL_ATTEMPT) -> list[tuple[str, dict[str, str]]]:
        return [v for v in super().volumes(label) if v[1].get(SCOPE) == self.scope]


@pytest.fixture
def engine() -> Iterator[ScopedEngine]:
    real = docker_engine()
    scoped = ScopedEngine(real.client)
    scoped.scope = uuid.uuid4().hex
    yield scoped
    for container in real.client.containers.list(all=True, filters={"label": f"{SCOPE}={scoped.scope}"}):
        container.remove(force=True)
    for volume in real.client.volumes.list(filters={"label": f"{SCOPE}={scoped.scope}"}):
        volume.remove(force=True)


def _container(engine: ScopedEngine, image: str, attempt: str, *, human: bool) -> Any:
    """A running container of an attempt whose harness is gone (its owner pid cannot exist), as a
    human attempt's is while nobody is attached, with a volume labelled with the same attempt."""
    labels = {LABEL_ATTEMPT: attempt, LABEL_OWNER: f"{socket.gethostname()}:999999999:1", SCOPE: engine.scope}
    if human:
        labels[LABEL_HUMAN] = attempt
    engine.client.volumes.create(f"rebench-test-{engine.scope[:12]}-{attempt}", labels=labels)
    return engine.client.containers.run(image, ["sleep", "120"], detach=True, labels=labels, network_mode="none")


def test_gc_keeps_human_attempts_even_with_all(engine: ScopedEngine, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    image = base_image(engine)
    human = _container(engine, image, "7001", human=True)
    orphan = _container(engine, image, "7002", human=False)
    report = collect_garbage(engine, everything=True)
    assert [c[1] for c in engine.containers()] == [human.name]  # the orphan went, the human attempt stayed
    assert [name for name, _ in engine.volumes()] == [f"rebench-test-{engine.scope[:12]}-7001"]
    human.reload()
    assert human.status == "running"
    assert report.removed_containers == [orphan.name] and human.name not in report.kept_running
    assert [(k.name, k.attempt_id) for k in report.kept_human] == [(human.name, "7001")]
    # the command says so, with the way to end it
    monkeypatch.setattr(DockerEngine, "connect", classmethod(lambda cls, timeout=5.0: engine))
    code, out, err = run_main(["gc", "--all"], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert f"kept 1 container(s) of human attempts, which gc never removes (not even with --all): {human.name} " \
           "(attempt 7001); end one with `rebench human stop ID`" in flat
    human.reload()
    assert human.status == "running"
