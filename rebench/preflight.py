"""Can this machine run (or build) a profile? Checked before anything starts.

A `paper` profile tried where it cannot work used to fail late: after minutes of calibration
("the starting solution did not score validly"), or deep inside a build script
(ModuleNotFoundError). `rebench run`, `envs build` and `envs calibrate` call `check` first; it
raises one line naming what is missing and how to provide it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from rebench.environments import assets as operator_assets
from rebench.environments.registry import Environment
from rebench.errors import RebenchError
from rebench.gpus import gpu_ids  # nvidia-smi -L; a fake one in tests

Purpose = Literal["build", "run", "calibrate", "doctor"]  # doctor: as calibrate, asked by `rebench doctor`


def _check_gpus(env: Environment, profile: str, purpose: Purpose, gpus: Sequence[int] | None) -> None:
    needed = env.profile(profile).resources.gpus
    if needed == 0:
        return
    present = gpu_ids()
    what = f"{env.name} ({profile}) needs {needed} GPU(s)"
    if not present:
        raise RebenchError(f"{what} but this machine has none (nvidia-smi -L lists no GPU); "
                           f"run it on a machine with {needed} NVIDIA GPU(s), or use --profile tiny")
    if len(present) < needed:
        raise RebenchError(f"{what} but this machine has {len(present)}; run it on a machine with {needed}")
    if purpose != "run":
        return  # calibration leases no ids; the inventory is enough
    if not gpus:
        ids = ",".join(str(i) for i in present[:needed])
        raise RebenchError(f"{what}; pass the device ids the scheduler may lease, e.g. --gpus {ids}")
    unknown = [i for i in gpus if i not in present]
    if unknown:
        raise RebenchError(f"invalid --gpus {','.join(map(str, gpus))}: this machine has GPU ids "
                           f"{','.join(map(str, present))} (nvidia-smi -L)")
    if len(gpus) < needed:
        raise RebenchError(f"{what} but --gpus gives {len(gpus)}; pass at least {needed} device ids")


_TORCH_PROBE = "import torch; print(torch.version.cuda or '', torch.cuda.is_available())"


def _check_local_torch(env: Environment, profile: str) -> None:
    """A GPU profile on the local backend runs the environment's virtualenv, which reuses the
    harness's PyTorch where the versions match: a CPU build there would run the paper task on
    the CPU (or fail after calibrating). Only for profiles whose requirements name torch."""
    from rebench.environments.build import local_python

    requirements = env.requirements(profile)
    names = [line.split("#")[0].strip().lower() for line in requirements.read_text().splitlines()] \
        if requirements else []
    if not any(name.startswith("torch") and not name.startswith("torchvision") for name in names):
        return
    try:
        python = str(local_python(env, profile, build=False))
    except RebenchError:
        python = sys.executable  # not built yet: the virtualenv will see the harness's torch
    probe = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=120)
    cuda, _, available = probe.stdout.strip().rpartition(" ")
    if probe.returncode != 0 or not cuda:
        raise RebenchError(f"{env.name} ({profile}) runs on the GPU but the local backend's PyTorch "
                           f"({python}) is {'missing' if probe.returncode else 'a CPU build'}; install "
                           "PyTorch's CUDA build into the harness's environment, or use --backend docker")
    if available != "True":
        raise RebenchError(f"{env.name} ({profile}): PyTorch (CUDA {cuda}) cannot use the GPU here "
                           "(torch.cuda.is_available() is False); check the NVIDIA driver")


def system_packages(env: Environment) -> list[str]:
    """The Debian packages of the environment's system-packages.txt (the Docker image installs them)."""
    path = env.part("system-packages.txt")
    if path is None:
        return []
    return [name for line in path.read_text(encoding="utf-8").splitlines() for name in line.split("#")[0].split()]


def _check_local_system_packages(env: Environment, profile: str) -> None:
    """The local backend runs the environment's code on this host with the system PATH of its
    sandboxes: each package of system-packages.txt must have put its command (the package's
    name) there (a rustc in ~/.cargo/bin, say, is not found by the sandbox)."""
    from rebench.sandbox.local import SYSTEM_PATH

    for package in system_packages(env):
        if shutil.which(package, path=SYSTEM_PATH) is None:
            raise RebenchError(f"{env.name} ({profile}) needs `{package}` on this machine for the local backend: "
                               f"install it (`apt-get install -y {package}`) or use --backend docker")


def check(env: Environment, profile: str, purpose: Purpose, *, gpus: Sequence[int] | None = None,
          assets: Mapping[str, Path] | None = None, backend: str | None = None, cluster: bool = False) -> None:
    """Raise RebenchError (one line) when this machine cannot `purpose` the profile.

    GPUs: a profile that needs them must find them (`--gpus`, checked against the inventory, for
    a run; the inventory for calibration), and on the local backend a CUDA PyTorch that sees
    them; building needs none. Operator assets: needed while the
    profile's build is not done yet (afterwards only what was built from them is used); `build`
    also checks their sha256 here, before the virtualenv and the build script start. `cluster`:
    attempts run on a cluster's nodes (the Ray executor), whose GPUs are not this machine's."""
    from rebench.environments.build import built_assets

    env.profile(profile)
    if purpose != "build" and not cluster:
        _check_gpus(env, profile, purpose, gpus)
        if backend == "local" and env.profile(profile).resources.gpus:
            _check_local_torch(env, profile)
        if backend == "local":
            _check_local_system_packages(env, profile)
    if not env.profile(profile).assets or built_assets(env, profile) is not None:
        return
    if purpose == "build":
        operator_assets.verify(env, profile, assets)
    else:
        operator_assets.locate(env, profile, assets)
