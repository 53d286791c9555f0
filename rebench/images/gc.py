"""`rebench gc`: remove what attempts left behind on the Docker engine.

A container whose harness process is gone (finished, crashed, SIGKILLed) is
garbage; one whose harness still runs is an attempt in progress and is kept,
unless `everything` is asked for. Volumes labelled with an attempt go with them, and so do
the networks of `--network full` attempts, with their host firewall rules.

A human attempt's container (labelled LABEL_HUMAN) is never removed, not even with
`everything`: it outlives its harness on purpose (the expert keeps working while the
operator reattaches), and only `rebench human stop ID` ends it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from rebench.images.naming import LABEL_KIND
from rebench.sandbox.docker import LABEL_ATTEMPT, LABEL_HUMAN, LABEL_OWNER, DockerEngine, owner_alive
from rebench.sandbox.docker.network import sweep_networks


class KeptHuman(BaseModel):
    """A human attempt's container that gc leaves alone."""

    name: str
    attempt_id: str


class GcReport(BaseModel):
    removed_containers: list[str] = Field(default_factory=list)
    kept_running: list[str] = Field(default_factory=list)
    kept_human: list[KeptHuman] = Field(default_factory=list)
    removed_volumes: list[str] = Field(default_factory=list)
    removed_networks: list[str] = Field(default_factory=list)
    removed_images: list[str] = Field(default_factory=list)


def collect_garbage(engine: DockerEngine, *, everything: bool = False, images: bool = False) -> GcReport:
    report = GcReport()
    live_attempts: set[str] = set()
    human: set[str] = set()
    for container_id, name, _status, labels in engine.containers(LABEL_HUMAN):
        human.add(container_id)
        attempt_id = labels.get(LABEL_HUMAN) or labels.get(LABEL_ATTEMPT, "")
        report.kept_human.append(KeptHuman(name=name, attempt_id=attempt_id))
        live_attempts.update({attempt_id, labels.get(LABEL_ATTEMPT, "")})
    for container_id, name, _status, labels in engine.containers(LABEL_ATTEMPT):
        if container_id in human or LABEL_HUMAN in labels:  # or one started since the listing above
            continue
        if not everything and owner_alive(labels.get(LABEL_OWNER, "")):
            report.kept_running.append(name)
            live_attempts.add(labels.get(LABEL_ATTEMPT, ""))
            continue
        if engine.remove_container(container_id):
            report.removed_containers.append(name)
    for volume, labels in engine.volumes(LABEL_ATTEMPT):
        if labels.get(LABEL_ATTEMPT) in live_attempts:
            continue
        if engine.remove_volume(volume):
            report.removed_volumes.append(volume)
    report.removed_networks = sweep_networks(
        engine.client, keep=lambda labels: not everything and owner_alive(labels.get(LABEL_OWNER, "")))
    if images:
        report.removed_images = prune_images(engine)
    return report


def prune_images(engine: DockerEngine) -> list[str]:
    """Drop superseded images: all but the newest environment image per environment and
    profile, and base images no longer tagged `latest` (the engine keeps any still in use)."""
    newest: dict[tuple[str, str], tuple[str, str]] = {}
    stale: list[str] = []
    for image_id, tags, labels in engine.images(LABEL_KIND):
        kind = labels.get(LABEL_KIND, "")
        if kind == "environment":
            key = (labels.get("rebench.environment", ""), labels.get("rebench.profile", ""))
            created = engine.image_created(image_id)
            if key in newest and newest[key][0] >= created:
                stale.append(image_id)
            else:
                if key in newest:
                    stale.append(newest[key][1])
                newest[key] = (created, image_id)
        elif kind.startswith("base-") and not any(tag.endswith(":latest") for tag in tags):
            stale.append(image_id)
    removed = []
    for image_id in stale:
        if engine.remove_image(image_id):
            removed.append(image_id)
    return removed
