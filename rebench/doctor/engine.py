"""The Docker engine as the docker backend needs it: reachable, its cgroups, a freezer for the agent,
root for the agent's cgroup and disk, the base image, and disk room for the images still to build.

Landlock (the scorer's confinement of submitted code) is asked here too: both backends score with it.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rebench.doctor.report import Check, Status
from rebench.environments.registry import Environment
from rebench.errors import RebenchError, SandboxError

if TYPE_CHECKING:
    from rebench.sandbox.docker import DockerEngine

IMAGE_GIB = {"cpu": 2.0, "cuda": 8.0}
"""Room an environment image takes, in GiB: 1-2 on the CPU base (PyTorch's CPU build and the
environment's files; docs/docker.md); an estimate of 8 on the CUDA base (PyTorch's CUDA wheels)."""

ENGINE_FIX = ("start a Docker engine (e.g. `systemctl start docker`) or point DOCKER_HOST at one that runs; "
              "without one, use --backend local")
ROOT_FIX = "run rebench as root on the engine's host: the agent's cgroup and its disk (a loop mount) need it"
FREEZER_FIX = ("boot with cgroup v2 (Linux 5.2+) or mount the v1 freezer hierarchy: the agent is frozen while "
               "it is scored")


def landlock() -> Check:
    from rebench.scoring.score_helper import confinement_unavailable

    reason = confinement_unavailable()
    if reason is None:
        return Check(area="scoring", name="landlock", status=Status.OK,
                     found="submitted code is confined while it is scored")
    return Check(area="scoring", name="landlock", status=Status.WARNING, found=reason,
                 fix="use Linux 5.13+ with Landlock enabled (lsm=...,landlock), or scoring runs submitted code "
                     "unconfined (it could read held-out data)")


@dataclass
class EngineFacts:
    """What the engine checks found, for the environment checks after them (None: no engine)."""

    checks: list[Check]
    engine: DockerEngine | None = None


def _row(name: str, status: Status, found: str, fix: str | None = None) -> Check:
    return Check(area="docker", name=name, status=status, found=found, fix=fix)


def docker(envs: Sequence[Environment], profile: str) -> EngineFacts:
    """The engine's rows; `envs`: the environments whose images at `profile` must fit on its disk."""
    if importlib.util.find_spec("docker") is None:
        return EngineFacts([_row("engine", Status.MISSING, "the Docker SDK is not installed",
                                "pip install 'rebench[docker]'")])
    from rebench.sandbox.docker import DockerEngine

    try:
        engine = DockerEngine.connect(timeout=3.0)
    except SandboxError:
        where = os.environ.get("DOCKER_HOST") or "the local socket (DOCKER_HOST is not set)"
        return EngineFacts([_row("engine", Status.MISSING, f"no engine answers at {where}", ENGINE_FIX)])
    version = engine.client.version()
    info = engine.client.info()
    checks = [_row("engine", Status.OK, f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')}), "
                                        f"{info.get('OperatingSystem', '?')}")]
    checks.append(_cgroups(info))
    checks.append(_row("root", Status.OK, "running as root") if os.geteuid() == 0 else
                  _row("root", Status.MISSING, f"running as uid {os.geteuid()}", ROOT_FIX))
    checks += _images(engine, envs, profile)
    return EngineFacts(checks, engine)


def _cgroups(info: dict[str, Any]) -> Check:
    from rebench.sandbox.docker.cgroups import host_freezer

    freezer = host_freezer()
    found = f"cgroup v{info.get('CgroupVersion', '?')} ({info.get('CgroupDriver', '?')} driver); freezer: "
    if freezer is None:
        return _row("cgroups", Status.MISSING, found + "none", FREEZER_FIX)
    return _row("cgroups", Status.OK, found + freezer)


def _images(engine: DockerEngine, envs: Sequence[Environment], profile: str) -> list[Check]:
    """The base image, and the disk's free room against the images `envs` still need at `profile`."""
    from rebench.images.build import base_kind, current_base_image, environment_image_tag
    from rebench.images.gc import DISK_WARNING_FRACTION

    base = current_base_image(engine, "cpu")
    checks = [_row("base image", Status.OK, base) if base else
              _row("base image", Status.WARNING, "not built: the first docker run builds it from debian:bookworm-slim",
                  "rebench images bootstrap (builds it without a registry)")]
    need = 0.0
    missing = []
    for env in envs:
        kind = base_kind(env, profile)
        kind_base = base if kind == "cpu" else current_base_image(engine, kind)
        try:
            built = kind_base is not None and engine.image_id(
                environment_image_tag(env, profile, engine, kind_base)) is not None
        except (RebenchError, SandboxError):
            built = False
        if not built:
            need += IMAGE_GIB[kind]
            missing.append(env.name)
    usage = engine.disk_usage()
    if usage is None:
        checks.append(_row("disk", Status.INFO, "the engine's data is on another host; not measured"))
        return checks
    used, total = usage
    free = (total - used) / 1024**3
    found = f"{free:.1f} GiB free of {total / 1024**3:.0f} GiB"
    if missing:
        found += f"; {len(missing)} image(s) to build at {profile} (about {need:.0f} GiB)"
    if free < need:
        checks.append(_row("disk", Status.MISSING, found, f"free {math.ceil(need - free)} GiB on the engine's disk "
                           "(`rebench images gc` removes superseded images)"))
    elif total and used / total > DISK_WARNING_FRACTION:
        checks.append(_row("disk", Status.WARNING, found, "`rebench images gc` removes superseded environment images"))
    else:
        checks.append(_row("disk", Status.OK, found))
    return checks
