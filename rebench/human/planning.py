"""A human attempt before it starts: every check on the operator's input (address, port, key, Docker,
the environment's anchors on this machine), then the attempt row and its HumanSession written at once.
Nothing is written while a check fails.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import sys
import tempfile
from pathlib import Path

from rebench.budget import parse_duration
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, HumanSession, HumanState

HUMAN_AGENT = "human"
LOOPBACK = "127.0.0.1"


def _check_bind(bind: str) -> str:
    try:
        return str(ipaddress.ip_address(bind.strip()))
    except ValueError:
        raise RebenchError(f"invalid --bind {bind!r}: give an IP address such as 127.0.0.1 (loopback, "
                           "the default) or 0.0.0.0 (every interface)") from None


def _check_port(bind: str, port: int) -> int:
    if not 0 <= port <= 65535:
        raise RebenchError(f"invalid --port {port}: must be 0 (any free port) to 65535")
    if port:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((bind, port))
            except OSError as exc:
                raise RebenchError(f"cannot listen on {bind}:{port}: {exc.strerror}; choose another --port") from None
    return port


def _read_key(key: Path) -> str:
    from rebench.sandbox.docker.ssh import check_public_key

    try:
        text = key.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RebenchError(f"cannot read --key {str(key)!r}: {reason}; give the expert's public key file "
                           "(e.g. id_ed25519.pub)") from None
    return check_public_key(text)


def _check_docker(backend: str, env_name: str, profile: str) -> None:
    if backend != "docker":
        raise RebenchError(f"human attempts need the docker backend, not {backend!r}: only a container gives the "
                           "expert the same isolation as an agent")
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.sandbox.factory import load_backend

    if not load_backend("docker").available():
        raise RebenchError("human attempts need the docker backend and no Docker engine answered")
    from rebench.images.build import current_environment_image
    from rebench.sandbox.docker.engine import DockerEngine

    current_environment_image(EnvironmentRegistry().get(env_name), profile, DockerEngine.connect())


def _calibrate_if_needed(store: Store, env: Environment, profile: str) -> None:
    """A timing profile is normalized with this machine's anchors, for experts as for agents: on a
    machine without them, measure them first, as `rebench run` does (before any row is written)."""
    from rebench.calibration import calibration_repeats, measure_anchors, resolve_anchors, save_calibration
    from rebench.preflight import check

    if env.profile(profile).hardware_dependent and resolve_anchors(store, env, profile).kind == "declared":
        print(f"{env.name} scores are timings and this machine has no calibration: measuring the starting "
              "and reference solutions first", file=sys.stderr, flush=True)
        # what `rebench.api.calibrate(env, profile, backend="docker", build=False)` does, called here
        # directly: the API sits above this layer
        check(env, profile, "calibrate", backend="docker")
        samples = asyncio.run(measure_anchors(env, profile, backend="docker",
                                              repeats=calibration_repeats(env, profile, None), log=lambda _line: None))
        save_calibration(store, env, profile, samples.start, samples.reference,
                         heldout_start=samples.heldout_start, heldout_reference=samples.heldout_reference)


def plan_human(store: Store, *, environment: str, profile: str, budget: str, name: str, key: Path,
               bind: str = LOOPBACK, port: int = 0, backend: str = "docker", gpus: list[int] | None = None) -> int:
    """Check everything, then write the attempt row and its HumanSession at once (state `starting`)."""
    from rebench import preflight
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry().get(environment)
    env.profile(profile)
    budget_s = parse_duration(budget)
    expert = " ".join(name.split())
    if not expert:
        raise RebenchError("invalid --name '': give the expert's name")
    if gpus:
        from rebench.human.gpus import check_free

        check_free(store, gpus)
    if backend == "docker":
        from rebench.sandbox.factory import load_backend

        load_backend("docker")  # without the docker extra: one line saying so, before the key is checked with it
    public_key = _read_key(key)
    address = _check_bind(bind)
    _check_port(address, port)
    _check_docker(backend, env.name, profile)
    preflight.check(env, profile, "run", gpus=gpus or [], backend="docker")
    _calibrate_if_needed(store, env, profile)
    from rebench.sandbox.docker.ssh import key_fingerprint

    gate_dir = tempfile.mkdtemp(prefix="rbh-")
    with store.session() as session:
        attempt = Attempt(source="own", environment=env.name, env_version=env.version, profile=profile,
                          agent=HUMAN_AGENT, model=None, budget_s=float(budget_s), seed=0,
                          status=AttemptStatus.QUEUED, backend="docker")
        session.add(attempt)
        session.flush()
        session.add(HumanSession(attempt_id=attempt.id, expert=expert, public_key=public_key,
                                 key_fingerprint=key_fingerprint(public_key), bind=address, port=port or None,
                                 gate_dir=gate_dir, state=HumanState.STARTING, gpus=list(gpus or []) or None))
        return attempt.id
