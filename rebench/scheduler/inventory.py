"""The GPUs of this host, for `--gpus all`: what `nvidia-smi -L` lists (the same reading preflight uses,
so the two never disagree; it comes with every NVIDIA driver, so no Python binding is needed).

`REBENCH_FAKE_GPUS` (a count, or ids like `0,1,3`) stands in for the inventory where there is no
GPU: tests and the makespan demo. It is never read when unset.
"""

from __future__ import annotations

import os

from rebench.errors import RebenchError

FAKE_ENV = "REBENCH_FAKE_GPUS"


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
    from rebench.preflight import gpu_inventory

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
