"""Scoring for Restricted Architecture MLM: masked-prediction loss of `get_trained_model()`.

Called by the rebench scoring helper as `score(ctx)`; run directly (`python score.py`)
it prints a result without logging it (on the visible validation split when the
held-out split is not readable).

For each of `eval_batches` batches of `seq_len` tokens from the held-out split, every
position is masked with probability `mask_prob` (replaced by `mask_id`); the model's
forward pass runs inside torch_rule_enforcer.restricted(), and the loss is the mean
cross-entropy at the masked positions. Raw score = ln(loss - loss_offset), lower is
better. A forbidden operation in the forward pass, a wrong output shape or a non-finite
loss makes the score invalid (None).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch


def load_solution_model(solution: Path) -> torch.nn.Module:
    sys.path.insert(0, str(solution))
    spec = importlib.util.spec_from_file_location("solution_model", solution / "model.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {solution / 'model.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.get_trained_model()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"get_trained_model() returned {type(model).__name__}, expected a torch.nn.Module")
    return model


def batches(path: Path, n: int, batch_size: int, seq_len: int, mask_prob: float, mask_id: int, seed: int):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    rng = np.random.Generator(np.random.PCG64(seed))
    for _ in range(n):
        ix = rng.integers(0, len(data) - seq_len, size=batch_size)
        tokens = np.stack([data[i:i + seq_len] for i in ix]).astype(np.int64)
        mask = rng.random(tokens.shape) < mask_prob
        inputs = np.where(mask, mask_id, tokens)
        yield torch.from_numpy(inputs), torch.from_numpy(tokens), torch.from_numpy(mask)


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    torch.set_num_threads(int(ctx.get("threads", 1)))
    home, solution, protected = Path(ctx["home"]), Path(ctx["solution"]), Path(ctx["protected"])
    sys.path.insert(0, str(home))
    from torch_rule_enforcer import DisallowedOperationError, restricted

    device = str(ctx.get("device", "cpu"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        device = "cpu"
    data_path = protected / "heldout.bin"
    message: dict[str, Any] = {}
    if not os.access(data_path, os.R_OK):
        data_path = home / "data" / "val.bin"
        message["note"] = "held-out data not readable here: scored on data/val.bin (use the score tool)"
    vocab, seq_len = int(ctx["vocab_size"]), int(ctx["seq_len"])
    try:
        model = load_solution_model(solution).to(device)
    except Exception as exc:
        error = f"loading the model failed: {type(exc).__name__}: {exc}"[:600]
        return {"raw": None, "message": {**message, "error": error}, "details": {}}
    model.eval()
    total, count = 0.0, 0
    seen: set[str] = set()
    try:
        with torch.no_grad():
            for inputs, targets, mask in batches(data_path, int(ctx["eval_batches"]), int(ctx["eval_batch_size"]),
                                                 seq_len, float(ctx["mask_prob"]), int(ctx["mask_id"]), seed=0):
                inputs, targets, mask = inputs.to(device), targets.to(device), mask.to(device)
                with restricted() as mode:
                    logits = model(inputs)
                seen |= mode.seen
                if mode.violation:
                    raise DisallowedOperationError(f"operation {mode.violation!r} is not allowed in the forward pass")
                if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (inputs.shape[0], seq_len, vocab):
                    shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                    return {"raw": None, "message": {**message, "error": f"forward returned {shape}, expected "
                                                     f"logits of shape [batch, {seq_len}, {vocab}]"}, "details": {}}
                loss = torch.nn.functional.cross_entropy(logits[mask].float(), targets[mask], reduction="sum")
                total += float(loss)
                count += int(mask.sum())
    except DisallowedOperationError as exc:
        return {"raw": None, "message": {**message, "error": f"rule violation: {exc}"[:600]},
                "details": {"ops_seen": sorted(seen)}}
    except torch.cuda.OutOfMemoryError:
        return {"raw": None, "message": {**message, "out_of_memory": True}, "details": {}}
    loss_value = total / max(count, 1)
    message["loss"] = round(loss_value, 4)
    if not math.isfinite(loss_value):
        return {"raw": None, "message": {**message, "error": "loss is not finite"}, "details": {}}
    offset = float(ctx["loss_offset"])
    raw = math.log(max(loss_value - offset, 1e-6))
    return {"raw": raw, "message": message,
            "details": {"loss": loss_value, "masked_tokens": count, "loss_offset": offset, "ops_seen": sorted(seen),
                        "data": data_path.name}}


def _direct_context() -> dict[str, Any]:
    here = Path(__file__).resolve().parent
    home = Path(os.environ.get("REBENCH_HOME") or here)
    ctx: dict[str, Any] = json.loads((home / "profile_params.json").read_text(encoding="utf-8"))
    params_file = os.environ.get("REBENCH_SCORE_PARAMS")
    if params_file and os.path.exists(params_file):
        ctx.update(json.loads(Path(params_file).read_text(encoding="utf-8")))
    ctx.setdefault("home", str(home))
    ctx.setdefault("solution", os.environ.get("REBENCH_SOLUTION") or str(home / "solution"))
    ctx.setdefault("protected", "/protected")
    return ctx


if __name__ == "__main__":
    print(json.dumps(score(_direct_context()), indent=2))
