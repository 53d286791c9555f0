"""`rebench gc`: remove what attempts left behind on the Docker engine.

A container whose harness process is gone (finished, crashed, SIGKILLed) is
garbage; one whose harness still runs is an attempt in progress and is kept,
unless `everything` is asked for. Volumes labelled with an attempt go with them, and so do
the agents' disks (rebench.sandbox.docker.disk), and
the networks of `--network full` attempts, with their host firewall rules.

A human attempt's container (labelled LABEL_HUMAN) is never removed, not even with
`everything`: it outlives its harness on purpose (the expert keeps working while the
operator reattaches), and only `rebench human stop ID` ends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from rebench.images.naming import LABEL_AGENT_BASE, LABEL_KIND
from rebench.sandbox.docker import LABEL_ATTEMPT, LABEL_HUMAN, LABEL_OWNER, DockerEngine, owner_alive
from rebench.sandbox.docker.disk import LABEL_DISK, release_folder, sweep_disks
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
    released_disks: list[str] = Field(default_factory=list)
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
            if labels.get(LABEL_DISK):
                release_folder(Path(labels[LABEL_DISK]))
    for volume, labels in engine.volumes(LABEL_ATTEMPT):
        if labels.get(LABEL_ATTEMPT) in live_attempts:
            continue
        if engine.remove_volume(volume):
            report.removed_volumes.append(volume)
    # The agents' disks no container names any more (a dead harness's, its container removed).
    report.released_disks = sweep_disks({labels[LABEL_DISK] for *_, labels in engine.containers(LABEL_ATTEMPT)
                                         if labels.get(LABEL_DISK)})
    report.removed_networks = sweep_networks(
        engine.client, keep=lambda labels: not everything and owner_alive(labels.get(LABEL_OWNER, "")))
    if images:
        report.removed_images = [entry.id for entry in prune_images(engine).removed]
    return report


class ImageEntry(BaseModel):
    id: str
    tags: list[str]
    environment: str = ""
    profile: str = ""


class ImageGcReport(BaseModel):
    """What `rebench images gc` removed and kept, and the engine's layer bytes it freed."""

    removed: list[ImageEntry] = Field(default_factory=list)
    kept_newest: list[ImageEntry] = Field(default_factory=list)
    kept_in_use: list[ImageEntry] = Field(default_factory=list)
    """Superseded, but a container (of a running, stopped or human attempt) or a resumable attempt uses it."""
    refused: list[ImageEntry] = Field(default_factory=list)
    """The engine would not remove it (a child image or a container made since the listing)."""
    freed_bytes: int = 0
    """Sum over the removals of the bytes of that image's layers no other image shared just before it went
    (the engine's own per-image figure, read before each removal; children go first, so an environment
    image's layers count once its agent images are gone). Per image, not the engine's total before and
    after, which another process building or removing images meanwhile would move."""


def prune_images(engine: DockerEngine, keep: Iterable[str] = (), *,
                 environments: Iterable[str] | None = None) -> ImageGcReport:
    """Drop superseded images: all but the newest environment image per environment and
    profile, base images no longer tagged `latest`, and installed agents' images built on a
    superseded environment image (or older than the agent's newest one for that environment and
    profile). Kept whatever its age: an image any container was made from, and the images named
    in `keep` (tags or ids: what resumable attempts will run). `environments`: only the images of
    these environments (and no base image)."""
    only = set(environments) if environments is not None else None
    protected = set(engine.images_in_use())
    for ref in keep:
        protected.add(ref)
        found = engine.image_id(ref)
        if found:
            protected.add(found)
    report = ImageGcReport()
    newest: dict[tuple[str, ...], tuple[str, ImageEntry]] = {}
    stale: list[ImageEntry] = []
    agents: list[tuple[ImageEntry, str]] = []
    for image_id, tags, labels in engine.images(LABEL_KIND):
        kind = labels.get(LABEL_KIND, "")
        if only is not None and labels.get("rebench.environment", "") not in only:
            continue
        entry = ImageEntry(id=image_id, tags=tags, environment=labels.get("rebench.environment", ""),
                           profile=labels.get("rebench.profile", ""))
        if kind in ("environment", "agent"):
            created = engine.image_created(image_id)
            if not created:  # removed since the listing (another gc or a build's cleanup)
                continue
            repository = tags[0].rsplit(":", 1)[0] if kind == "agent" and tags else ""
            _keep_newest(newest, stale, (kind, repository, entry.environment, entry.profile), created, entry)
            if kind == "agent":
                agents.append((entry, labels.get(LABEL_AGENT_BASE, "")))
        elif kind.startswith("base-") and not any(tag.endswith(":latest") for tag in tags):
            stale.append(entry)
    superseded = {tag for entry in stale for tag in entry.tags} | {entry.id for entry in stale}
    for entry, base in agents:  # on a superseded environment image, the agent's image goes with it
        if base in superseded and entry not in stale:
            stale.append(entry)
    report.kept_newest = [entry for _, entry in newest.values() if entry not in stale]
    in_use = {entry.id for entry in stale if entry.id in protected or protected.intersection(entry.tags)}
    # children first: the engine refuses to remove an environment image an agent image is built on
    for entry in sorted(stale, key=lambda e: e.id not in {a.id for a, _ in agents}):
        if entry.id in in_use:
            report.kept_in_use.append(entry)
            continue
        unique = engine.unique_image_bytes().get(entry.id, 0)
        if engine.remove_image(entry.id):
            report.removed.append(entry)
            report.freed_bytes += unique
        else:
            report.refused.append(entry)
    return report


def _keep_newest(newest: dict[tuple[str, ...], tuple[str, ImageEntry]], stale: list[ImageEntry],
                 key: tuple[str, ...], created: str, entry: ImageEntry) -> None:
    if key in newest and newest[key][0] >= created:
        stale.append(entry)
        return
    if key in newest:
        stale.append(newest[key][1])
    newest[key] = (created, entry)


DISK_WARNING_FRACTION = 0.85


def engine_disk_warning(engine: DockerEngine, fraction: float = DISK_WARNING_FRACTION) -> str | None:
    """One line when the disk holding the engine's images is fuller than `fraction`, else None."""
    usage = engine.disk_usage()
    if usage is None or usage[1] == 0 or usage[0] / usage[1] <= fraction:
        return None
    used, total = usage
    return (f"the Docker engine's disk is {used / total:.0%} full ({(total - used) / 1024**3:.1f} GiB free): "
            f"`rebench images gc` removes superseded environment images")
