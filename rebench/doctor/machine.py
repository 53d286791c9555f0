"""This machine apart from the Docker engine: Python, rebench, GPUs, SSH, Ray, model keys, the database.

Each function returns rows (rebench.doctor.report.Check) and never raises for what it finds missing:
a doctor that stops at the first problem hides the others.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rebench.doctor.report import Check, Status
from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.gpus import FAKE_ENV, gpu_ids
from rebench.models.names import KEY_VARIABLES
from rebench.provenance import rebench_version


def versions() -> list[Check]:
    python = f"{platform.python_version()} ({sys.executable})"
    status = Status.OK if sys.version_info >= (3, 11) else Status.MISSING
    return [
        Check(area="python", name="python", status=status, found=python,
              fix=None if status is Status.OK else "rebench needs Python 3.11 or newer"),
        Check(area="rebench", name="rebench", status=Status.INFO,
              found=f"{rebench_version()} ({Path(__file__).parents[1]})"),
    ]


def _nvidia_versions() -> tuple[str, str]:
    """(driver, CUDA) versions from `nvidia-smi`'s header ("?" where it says none)."""
    try:
        header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "?", "?"
    driver = re.search(r"Driver Version:\s*([\w.]+)", header)
    cuda = re.search(r"CUDA Version:\s*([\w.]+)", header)
    return (driver.group(1) if driver else "?"), (cuda.group(1) if cuda else "?")


def gpus(registry: EnvironmentRegistry) -> list[Check]:
    """The GPUs `nvidia-smi -L` lists (the inventory the scheduler leases from), and which profiles need more."""
    ids = gpu_ids()
    if os.environ.get(FAKE_ENV) is not None:
        found = f"{len(ids)} stand-in GPU(s) from {FAKE_ENV} (no driver asked)"
    elif shutil.which("nvidia-smi") is None:
        found = "none: nvidia-smi is not installed"
    else:
        driver, cuda = _nvidia_versions()
        found = f"{len(ids)} GPU(s), driver {driver}, CUDA {cuda}"
    needs = sorted((env.profile(p).resources.gpus, f"{name}/{p}") for name in registry.names()
                   for env in [registry.get(name)] for p in env.metadata.profiles if env.profile(p).resources.gpus)
    beyond = [name for count, name in needs if count > len(ids)]
    summary = (f"{len(needs)} profiles need GPUs ({needs[0][0]} to {needs[-1][0]} each)" if needs
               else "no profile needs a GPU")
    if needs:
        summary += f"; {len(beyond)} of them need more than this machine has" if beyond else "; all fit here"
    return [
        Check(area="gpus", name="nvidia", status=Status.OK if ids else Status.INFO, found=found),
        Check(area="gpus", name="profiles", status=Status.INFO, found=summary,
              fix=f"run {beyond[0]} and the like on a machine with their GPUs (`rebench envs list` says how many)"
              if beyond else None),
    ]


def ssh() -> Check:
    """Human attempts: the expert connects with an OpenSSH client to a relay on this host."""
    client = shutil.which("ssh")
    if client is None:
        return Check(area="human", name="ssh client", status=Status.MISSING, found="ssh is not on PATH",
                     fix="apt-get install openssh-client (to try a human attempt's door from here)")
    try:
        said = subprocess.run([client, "-V"], capture_output=True, text=True, timeout=10)
        version = (said.stderr or said.stdout).strip().split(",")[0]
    except (OSError, subprocess.SubprocessError):
        version = client
    return Check(area="human", name="ssh client", status=Status.OK,
                 found=f"{version}; sshd comes in the base image (human attempts need the docker backend)")


def ray(address: str | None, timeout_s: float = 5.0) -> Check:
    if importlib.util.find_spec("ray") is None:
        check = Check(area="ray", name="ray", status=Status.MISSING if address else Status.INFO,
                      found="not installed (only `--executor ray` needs it)", fix="pip install 'rebench[ray]'")
        return check.needed(f"--ray-address {address}" if address else None)
    found = f"ray {importlib.metadata.version('ray')}"
    if not address:
        return Check(area="ray", name="ray", status=Status.OK, found=f"{found}; pass --ray-address to knock on a head")
    from rebench.scheduler.ray_connect import check_reachable

    if "://" in address or ":" not in address:  # `auto`, `ray://...`: Ray resolves those itself when a run joins
        return Check(area="ray", name="ray", status=Status.INFO, found=f"{found}; {address} is Ray's to resolve "
                     "when a run joins (only host:port is knocked on here)")
    try:
        check_reachable(address, timeout_s)
    except RebenchError as exc:
        return Check(area="ray", name="ray", status=Status.MISSING, found=f"{found}; {address} does not answer",
                     fix=str(exc)).needed(f"--ray-address {address}")
    return Check(area="ray", name="ray", status=Status.OK, found=f"{found}; a head answers at {address}")


def model_keys() -> Check:
    """Which providers' key variables are set: names only, never a value or its length."""
    present = [name for name in KEY_VARIABLES.values() if os.environ.get(name, "").strip()]
    absent = [name for name in KEY_VARIABLES.values() if name not in present]
    found = "; ".join(part for part in (f"set: {', '.join(present)}" if present else "",
                                        f"not set: {', '.join(absent)}" if absent else "") if part)
    return Check(area="models", name="keys", status=Status.OK if present else Status.INFO, found=found)


def _writable_folder(path: Path) -> tuple[bool, Path]:
    """Whether the file's folder (or the nearest one that exists, where it would be made) takes new files:
    SQLite writes its -wal and -shm files beside the database."""
    folder = path.parent.resolve()
    while not folder.exists():
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK), folder


def database(path: Path) -> Check:
    """The results database a run would write: its schema as this rebench reads it, and whether it can write."""
    from rebench.store.schema import FileKind, head_revision, inspect_file

    try:
        state = inspect_file(path)
    except RebenchError as exc:
        return Check(area="database", name="database", status=Status.MISSING, found=str(path), fix=str(exc))
    problem = state.problem()
    if problem:
        return Check(area="database", name="database", status=Status.MISSING, found=f"{path}: {state.kind}",
                     fix=problem)
    writable, folder = _writable_folder(path)
    if not writable or (path.exists() and not os.access(path, os.W_OK)):
        return Check(area="database", name="database", status=Status.MISSING, found=f"{path}: not writable",
                     fix=f"make {path if path.exists() else folder} writable, or pass --db / REBENCH_DB elsewhere")
    if state.kind is FileKind.MISSING:
        return Check(area="database", name="database", status=Status.OK,
                     found=f"{path}: not made yet; the first run makes it (schema {head_revision()})")
    if state.kind is FileKind.OLDER:
        return Check(area="database", name="database", status=Status.WARNING,
                     found=f"{path}: schema {state.revision}", fix=state.needs_upgrade())
    return Check(area="database", name="database", status=Status.OK,
                 found=f"{path}: schema {state.revision} (current), writable")
