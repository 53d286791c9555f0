"""Scoring for Fix Embedding: the held-out loss of `fixed_model.pth` in the large model's architecture.

Called by the rebench scoring helper as `score(ctx)`; run directly (`python score.py`)
it prints a result without logging it (and, without access to the protected folder,
reports the training loss only).

Raw score = ln(validation loss - loss_offset), lower is better. The checkpoint is loaded
strictly into the fixed large-model config of the environment kit's GPT (the same code as
`static_model.py` in the agent's home, which the scorer never imports), which is the
architecture check: a missing, extra or differently shaped tensor makes the score
invalid (None). Checkpoints are loaded with `weights_only=True` (tensors, never code).
Until `fixed_model.pth` exists, the corrupted `large_model.pth` is scored, so the
starting score is the corrupted model's.

The `split` param names the held-out file: "intermediate" (the default: /protected/val.bin, what
every score call uses) or "final" (/protected/final.bin, the held-out final split the harness scores
once after the attempt with params-final.json; tiny only, docs/heldout.md). An unknown split, or a
final split that is missing or not readable, makes the score invalid. The details give the
validation loss's standard error over its batches and the raw score's (`loss_se`, `raw_se`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rebench.kit.context import direct_context
from rebench.kit.gpt import GPT, GPTConfig
from rebench.kit.torch_scoring import prepare

SUBMISSION = "fixed_model.pth"
SPLIT_FILES = {"intermediate": "val.bin", "final": "final.bin"}
"""The held-out file in the protected folder for each value of the `split` param."""


def _batches(path: Path, iters: int, batch_size: int, block_size: int, seed: int):
    """Fixed random windows (the same every call, so scores are comparable)."""
    data = np.memmap(path, dtype=np.uint16, mode="r")
    rng = np.random.Generator(np.random.PCG64(seed))
    for _ in range(iters):
        ix = rng.integers(0, len(data) - block_size - 1, size=batch_size)
        x = np.stack([data[i:i + block_size] for i in ix]).astype(np.int64)
        y = np.stack([data[i + 1:i + 1 + block_size] for i in ix]).astype(np.int64)
        yield torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def batch_losses(model: torch.nn.Module, path: Path, iters: int, batch_size: int, block_size: int,
                 device: str, seed: int) -> list[float]:
    """The mean loss of each batch (all batches hold as many tokens)."""
    losses = []
    for x, y in _batches(path, iters, batch_size, block_size, seed):
        logits, _ = model(x.to(device))
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.to(device).reshape(-1))
        losses.append(float(loss))
    return losses


def mean_loss(model: torch.nn.Module, path: Path, iters: int, batch_size: int, block_size: int,
              device: str, seed: int) -> float:
    return sum(batch_losses(model, path, iters, batch_size, block_size, device, seed)) / iters


def standard_error(values: list[float]) -> float | None:
    """The standard error of the mean of `values` (None under two)."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def load_submission(path: Path, home: Path, config: dict, device: str) -> torch.nn.Module:
    """Strictly load a state dict into the fixed architecture (raises ValueError on mismatch)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError("the checkpoint must be a state dict of tensors")
    model = GPT(GPTConfig(**config))
    expected = {k: v.shape for k, v in model.state_dict().items() if k != "lm_head.weight"}
    given = {k: v.shape for k, v in state.items() if k != "lm_head.weight"}
    missing = sorted(set(expected) - set(given))
    extra = sorted(set(given) - set(expected))
    wrong = sorted(k for k in set(expected) & set(given) if tuple(expected[k]) != tuple(given[k]))
    if missing or extra or wrong:
        parts = []
        if missing:
            parts.append(f"missing {missing[:3]}")
        if extra:
            parts.append(f"unexpected {extra[:3]}")
        if wrong:
            parts.append(f"wrong shape {[(k, tuple(given[k]), tuple(expected[k])) for k in wrong[:3]]}")
        raise ValueError("architecture differs from the large model: " + "; ".join(parts))
    if "lm_head.weight" in state and not torch.equal(state["lm_head.weight"], state["transformer.wte.weight"]):
        raise ValueError("lm_head.weight must stay tied to transformer.wte.weight")
    state = {k: v.float() for k, v in state.items() if k != "lm_head.weight"}
    model.load_state_dict(state, strict=False)
    model.eval()
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    return model.to(device=device, dtype=dtype)


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    home, solution, protected, device = prepare(ctx)
    split = str(ctx.get("split", "intermediate"))
    if split not in SPLIT_FILES:
        return {"raw": None, "message": {"error": f"unknown split {split!r}: allowed are {', '.join(SPLIT_FILES)}"},
                "details": {}}
    val_path = protected / SPLIT_FILES[split]
    if split != "intermediate" and not os.access(val_path, os.R_OK):
        # only the harness scores the final split, and it can read it
        return {"raw": None, "message": {"error": f"{val_path} is missing or not readable"}, "details": {}}
    config = dict(ctx["large_config"])
    block = int(config["block_size"])
    submission = solution / SUBMISSION
    scored = submission if submission.exists() else home / "large_model.pth"
    message: dict[str, Any] = {}
    if scored != submission:
        message["note"] = f"no {SUBMISSION} in the solution folder yet: scored the corrupted large_model.pth"
    try:
        model = load_submission(scored, home, config, device)
    except (ValueError, RuntimeError, OSError, EOFError, TypeError) as exc:
        # pickle errors (weights_only refusals) are subclasses of these or of UnpicklingError
        return {"raw": None, "message": {**message, "error": f"invalid submission: {exc}"[:500]},
                "details": {"file": str(scored)}}
    except Exception as exc:  # e.g. _pickle.UnpicklingError from weights_only
        return {"raw": None, "message": {**message, "error": f"cannot load {scored.name}: {exc}"[:500]},
                "details": {"file": str(scored)}}
    try:
        loss_train = mean_loss(model, home / "data" / "train.bin", int(ctx["train_eval_iters"]),
                               int(ctx["eval_batch_size"]), block, device, seed=1)
        message["loss_train"] = round(loss_train, 4)
        if not os.access(val_path, os.R_OK):
            message["loss_validation"] = None
            message["note_validation"] = "held-out data not readable here; use the score tool for the real score"
            return {"raw": None, "message": message, "details": {}}
        losses = batch_losses(model, val_path, int(ctx["eval_iters"]), int(ctx["eval_batch_size"]), block,
                              device, seed=0)
        loss_val = sum(losses) / len(losses)
    except torch.cuda.OutOfMemoryError:
        return {"raw": None, "message": {**message, "out_of_memory": True}, "details": {}}
    message["loss_validation"] = round(loss_val, 4)
    offset = float(ctx["loss_offset"])
    if not math.isfinite(loss_val):
        return {"raw": None, "message": {**message, "error": "validation loss is not finite"}, "details": {}}
    raw = math.log(max(loss_val - offset, 1e-6))
    loss_se = standard_error(losses)
    # to first order, ln(loss - offset) moves by d(loss) / (loss - offset)
    raw_se = None if loss_se is None else loss_se / max(loss_val - offset, 1e-6)
    return {"raw": raw, "message": message, "details": {"loss_validation": loss_val, "loss_offset": offset,
                                                         "file": str(scored), "data": val_path.name, "split": split,
                                                         "loss_se": loss_se, "raw_se": raw_se}}


if __name__ == "__main__":
    print(json.dumps(score(direct_context(__file__)), indent=2))
