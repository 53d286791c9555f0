"""The GPUs of this host: what `nvidia-smi -L` lists, read by preflight, calibration's hardware
fingerprint and the scheduler's `--gpus all` alike, so they never disagree (it comes with every NVIDIA
driver, so no Python binding is needed). It sits below all three, which is why it is its own module.

`REBENCH_FAKE_GPUS` (a count, or ids like `0,1,3`) stands in for the inventory where there is no
GPU: tests and the makespan demo. It is never read when unset.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from rebench.errors import RebenchError

FAKE_ENV = "REBENCH_FAKE_GPUS"


def gpu_listing() -> list[str]:
    """The lines of `nvidia-smi -L` ([] without the driver), one per GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in listing.splitlines() if line.strip()]


def gpu_inventory() -> list[int]:
    """Device ids of the NVIDIA GPUs `nvidia-smi -L` lists here."""
    ids = []
    for line in gpu_listing():  # "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)"
        head = line.split(":", 1)[0]
        if head.startswith("GPU ") and head[4:].strip().isdigit():
            ids.append(int(head[4:]))
    return ids


def _fake(text: str) -> list[int]:
    try:
        if "," in text:
            return sorted({int(part) for part in text.split(",") if part.strip()})
        return list(range(int(text)))
    except ValueError:
        raise RebenchError(f"invalid {FAKE_ENV}={text!r}: a count like 4 or device ids like 0,1,3") from None


def gpu_ids() -> list[int]:
    """Device ids of this host's NVIDIA GPUs ([] without any)."""
    fake = os.environ.get(FAKE_ENV)
    if fake is not None:
        return _fake(fake)
    return gpu_inventory()


def parse_gpus(text: str | None) -> list[int]:
    """`--gpus`: device ids like 0,1,2, or `all` (this host's inventory). None: not given. Given but
    naming no device (`''`, `,`, or `all` on a host without GPUs) is an error, not a silent "no GPUs"."""
    if text is None:
        return []
    if text.strip().lower() == "all":
        found = gpu_ids()
        if not found:
            raise RebenchError("invalid --gpus 'all': this host has no GPU that rebench can see (nvidia-smi)")
        return found
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RebenchError(f"invalid --gpus {text!r}: use device ids like 0,1,2 or `all`") from None
    if not ids:
        raise RebenchError(f"invalid --gpus {text!r}: name at least one device id, like 0,1,2, or `all`")
    return ids
