"""Choosing and creating a sandbox backend for one attempt.

Backends register through the `rebench.sandboxes` entry-point group (rebench's own,
`local` and `docker`, in its pyproject.toml), each naming a `SandboxBackend`; a third
party adds one by declaring an entry point, without editing rebench.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from rebench.errors import RebenchError
from rebench.plugins import entry_points_by_name
from rebench.sandbox.base import SandboxBackend

ENTRY_POINT_GROUP = "rebench.sandboxes"
DEFAULT_BACKEND = "docker"
"""Used when none is asked for and it can run here (an engine answers); else `FALLBACK_BACKEND`."""
FALLBACK_BACKEND = "local"


def _entry_points() -> dict[str, EntryPoint]:
    return entry_points_by_name(ENTRY_POINT_GROUP, "sandbox backend")


def backend_names() -> list[str]:
    """The installed backends' names (nothing is imported to list them)."""
    return sorted(_entry_points())


def _unknown(name: str) -> RebenchError:
    allowed = ", ".join(backend_names()) or f"none (no entry points in group {ENTRY_POINT_GROUP!r}; reinstall rebench)"
    return RebenchError(f"unknown backend {name!r}; allowed: {allowed}")


def load_backend(name: str) -> SandboxBackend:
    """The backend registered as `name`; a one-line error for an unknown name or one that cannot load."""
    ep = _entry_points().get(name)
    if ep is None:
        raise _unknown(name)
    try:
        backend = ep.load()
    except ImportError as exc:
        raise RebenchError(f"backend {name!r} cannot be loaded ({exc}); is its extra installed?") from None
    if not isinstance(backend, SandboxBackend):
        raise RebenchError(f"backend {name!r} ({ep.value}) is not a SandboxBackend")
    return backend


def docker_available() -> bool:
    """Whether the default backend can run here; its SDK is imported only when asked."""
    try:
        return DEFAULT_BACKEND in backend_names() and load_backend(DEFAULT_BACKEND).available()
    except RebenchError:
        return False


def resolve_backend(requested: str | None) -> tuple[str, str | None]:
    """The backend to use and a warning to show, if any."""
    if requested is not None and requested not in backend_names():
        raise _unknown(requested)
    if requested:
        return requested, None
    if docker_available():
        return DEFAULT_BACKEND, None
    return FALLBACK_BACKEND, f"no Docker engine answered; using the {FALLBACK_BACKEND} backend"

