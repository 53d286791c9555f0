"""Set-up shared by scorers that evaluate a PyTorch model on held-out data (needs PyTorch,
which those environments have; the kit's stdlib-only part does not import this)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def prepare(ctx: dict[str, Any]) -> tuple[Path, Path, Path, str]:
    """(home, solution, protected, device) of a score call, with PyTorch limited to
    ctx["threads"] threads (default 1); a CUDA device falls back to the CPU where none is present.
    `home` is the scorer's copy of the build's home files (ctx["scoring_home"], in the protected
    folder) where the harness made one: the agent owns its home and could rename anything in it."""
    torch.set_num_threads(int(ctx.get("threads", 1)))
    device = str(ctx.get("device", "cpu"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        device = "cpu"
    return Path(ctx.get("scoring_home") or ctx["home"]), Path(ctx["solution"]), Path(ctx["protected"]), device
