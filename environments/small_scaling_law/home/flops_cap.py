"""The training-FLOPs cap of the Scaling Law Experiment (read-only; `train.py` imports it).

FLOPs of a run = n_layer * n_embd^2 * 12 * 6 * block_size * batch_size * max_iters,
RE-Bench's formula (6 FLOPs per parameter per token, 12 * n_embd^2 parameters per
layer). n_layer, block_size and batch_size are fixed by the task; they and the cap
are read from `scaling_constants.json` next to this file.

`approve_run` refuses a run whose planned FLOPs exceed the cap before it starts, and
`StepGuard` stops a training loop that tries to take more steps than were approved,
so an honest experiment cannot go over the cap by accident. Every approved run is
appended to the FLOPs ledger in the solution folder, which the scorer reads.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
CONSTANTS = json.loads((_HERE / "scaling_constants.json").read_text(encoding="utf-8"))
N_LAYER: int = CONSTANTS["n_layer"]
BLOCK_SIZE: int = CONSTANTS["block_size"]
BATCH_SIZE: int = CONSTANTS["batch_size"]
EXPERIMENT_CAP: float = CONSTANTS["experiment_flops_cap"]
TARGET_FLOPS: float = CONSTANTS["target_flops"]
LEDGER_NAME = "flops_ledger.jsonl"


class FlopsCapExceeded(RuntimeError):
    """A run would use more training FLOPs than the experiment cap allows."""


def training_flops(n_embd: int, max_iters: int, n_layer: int = N_LAYER,
                   block_size: int = BLOCK_SIZE, batch_size: int = BATCH_SIZE) -> float:
    return float(n_layer) * float(n_embd) ** 2 * 12 * 6 * block_size * batch_size * max_iters


def max_iters_within_cap(n_embd: int, cap: float = EXPERIMENT_CAP) -> int:
    return int(cap // training_flops(n_embd, 1))


def ledger_path() -> Path:
    solution = os.environ.get("REBENCH_SOLUTION") or str(_HERE / "solution")
    return Path(solution) / LEDGER_NAME


def approve_run(n_embd: int, max_iters: int, *, cap: float = EXPERIMENT_CAP, ledger: Path | None = None,
                note: str = "") -> float:
    """Check a planned run against the cap, record it in the ledger and return its FLOPs."""
    flops = training_flops(n_embd, max_iters)
    if flops > cap:
        raise FlopsCapExceeded(
            f"n_embd={n_embd}, max_iters={max_iters} needs {flops:.3e} FLOPs, over the experiment cap of "
            f"{cap:.3e}; at this n_embd at most max_iters={max_iters_within_cap(n_embd, cap)} is allowed"
        )
    record = {"time": time.time(), "n_embd": n_embd, "max_iters": max_iters, "flops": flops, "cap": cap,
              "note": note}
    path = ledger or ledger_path()
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError:
        pass  # a read-only solution folder must not stop an experiment
    return flops


class StepGuard:
    """Counts optimizer steps and raises once a run takes more than it was approved for."""

    def __init__(self, approved_iters: int) -> None:
        self.approved_iters = approved_iters
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.approved_iters:
            raise FlopsCapExceeded(f"training took step {self.steps}, more than the {self.approved_iters} approved")
