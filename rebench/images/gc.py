"""`rebench gc`: remove what attempts left behind on the Docker engine.

A container whose harness process is gone (finished, crashed, SIGKILLed) is
garbage; one whose harness still runs is an attempt in progress and is kept,
unless `everything` is asked for. Volumes labelled with an attempt go with them.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from rebench.sandbox.docker import LABEL_ATTEMPT, LABEL_OWNER, DockerEngine, owner_alive


class GcReport(BaseModel):
    removed_containers: list[str] = Field(default_factory=list)
    kept_running: list[str] = Field(default_factory=list)
    removed_volumes: list[str] = Field(default_factory=list)


def collect_garbage(engine: DockerEngine, *, everything: bool = False) -> GcReport:
    report = GcReport()
    live_attempts: set[str] = set()
    for container_id, name, _status, labels in engine.containers(LABEL_ATTEMPT):
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
    return report
