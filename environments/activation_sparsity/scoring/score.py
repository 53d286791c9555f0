"""Scoring for Activation Sparsity: the perplexity the sparsity plan of `sparsify.py` costs.

Called by the rebench scoring helper as `score(ctx)`; run directly (`python score.py`) it prints
a result without logging it (on the calibration text when the held-out text is not readable).

The agent's sparsify.py runs only in a confined child (plan_worker.py) that cannot read the
held-out text: it computes a plan (per sparsified layer, a transform and a selection rule; see
sparse_gpt.py) from the model and the calibration text, and sends it back as JSON and tensor
bytes. This process, which runs no agent code, applies the plan to its own copy of the model and
evaluates both models on the held-out text. It counts the zeros entering every sparsified linear
layer itself: a layer whose measured sparsity is below `target_sparsity - sparsity_tolerance`
makes the score invalid (None), so quality cannot be bought with less sparsity.

Raw score = ln(ppl_sparse - ppl_dense), lower is better (the difference is floored at MIN_GAP).

The `split` param names the held-out text: "intermediate" (the default: /protected/heldout.bin,
what every score call uses) or "final" (/protected/final.bin, the held-out final split the harness
scores once after the attempt with params-final.json; tiny only, docs/heldout.md). An unknown
split, or a final split that is missing or not readable, makes the score invalid. The details give
the raw score's standard error over the held-out sequences (`raw_se`).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from rebench.kit.confined import ChildFailed, ChildTimeout, ConfinedChild
from rebench.kit.context import direct_context
from rebench.kit.gpt import GPT, GPTConfig
from rebench.kit.torch_scoring import prepare

HERE = Path(__file__).resolve().parent
MIN_GAP = 1e-4
"""The smallest perplexity gap scored (a plan cannot be better than free)."""
MAX_PLAN_BYTES = 256 << 20
SPLIT_FILES = {"intermediate": "heldout.bin", "final": "final.bin"}
"""The held-out text in the protected folder for each value of the `split` param."""
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64, "int32": torch.int32}


def sparse_module() -> ModuleType:
    """scoring/sparse_gpt.py, this folder's (never the agent's home copy)."""
    spec = importlib.util.spec_from_file_location("activation_sparsity_sparse_gpt", HERE / "sparse_gpt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan_in_child(ctx: dict[str, Any], home: Path, solution: Path, timeout_s: float) -> tuple[dict, bool]:
    """The plan of the agent's sparsify.py, computed in a confined child; (plan, confined)."""
    source = (HERE / "plan_worker.py").read_text(encoding="utf-8")
    child = ConfinedChild(ctx, source, [str(solution), str(int(ctx.get("threads", 1)))], cwd=str(solution),
                          name="the sparsify.py process")
    try:
        child.send({"sparse_source": (HERE / "sparse_gpt.py").read_text(encoding="utf-8"),
                    "model": str(Path(ctx["home"]) / "model.pth"), "config": ctx["model_config"],
                    "calibration": str(Path(ctx["home"]) / "data" / "calibration.bin"),
                    "block_size": int(ctx["model_config"]["block_size"]), "target": float(ctx["target_sparsity"])})
        reply = child.receive(timeout_s, max_payload_bytes=MAX_PLAN_BYTES)
    finally:
        child.close(grace_s=30.0)
    if "error" in reply:
        raise ChildFailed(str(reply["error"]))
    return decode_plan(reply), child.confined


def decode_plan(reply: dict[str, Any]) -> dict[str, dict[str, torch.Tensor]]:
    """The plan from the child's JSON and bytes (nothing unpickled); ChildFailed when malformed."""
    plan: dict[str, dict[str, torch.Tensor]] = {}
    payload, offset = reply["payload"], 0
    try:
        for spec in reply["tensors"]:
            dtype = _DTYPES[spec["dtype"]]
            shape = [int(size) for size in spec["shape"]]
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if any(size < 0 for size in shape) or int(spec["nbytes"]) != nbytes or offset + nbytes > len(payload):
                raise ValueError(f"tensor {spec['site']}.{spec['key']} has the wrong size")
            data = bytearray(payload[offset:offset + nbytes])
            tensor = torch.frombuffer(data, dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)
            plan.setdefault(str(spec["site"]), {})[str(spec["key"])] = tensor.reshape(shape)
            offset += nbytes
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ChildFailed(f"the plan is malformed: {type(exc).__name__}: {exc}"[:600]) from exc
    if offset != len(payload):
        raise ChildFailed("the plan is malformed: extra bytes after the tensors")
    return plan


@torch.no_grad()
def evaluate(model: torch.nn.Module, tokens: torch.Tensor, batch_size: int = 32) -> tuple[float, list[float]]:
    """The model's perplexity on `tokens` (sequences x positions) and each sequence's mean loss."""
    total = 0.0
    per_sequence: list[float] = []
    for start in range(0, len(tokens), batch_size):
        batch = tokens[start:start + batch_size]
        logits, _ = model(batch[:, :-1].contiguous())
        flat, targets = logits.float().reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1)
        total += float(torch.nn.functional.cross_entropy(flat, targets, reduction="sum"))
        losses = torch.nn.functional.cross_entropy(flat, targets, reduction="none")
        per_sequence += losses.reshape(len(batch), -1).mean(1).tolist()
    return math.exp(total / (len(tokens) * (tokens.shape[1] - 1))), per_sequence


def gap_se(ppl_sparse: float, ppl_dense: float, sparse: list[float], dense: list[float]) -> float | None:
    """The standard error of ppl_sparse - ppl_dense over the sequences, to first order: each
    perplexity is exp(the mean of the sequences' losses), and the two models read the same
    sequences, so the difference is taken sequence by sequence. None under two sequences."""
    n = len(sparse)
    if n < 2:
        return None
    terms = [ppl_sparse * a - ppl_dense * b for a, b in zip(sparse, dense, strict=True)]
    mean = sum(terms) / n
    return math.sqrt(sum((t - mean) ** 2 for t in terms) / (n - 1) / n)


def load_model(home: Path, config: dict) -> GPT:
    state = torch.load(home / "model.pth", map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**config))
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model.eval()


def read_tokens(path: Path, sequences: int, block: int) -> torch.Tensor:
    tokens = np.fromfile(path, dtype=np.uint16)[:sequences * block].astype(np.int64)
    return torch.from_numpy(tokens[:len(tokens) // block * block].reshape(-1, block))


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    home, solution, protected, _device = prepare(ctx)
    config = dict(ctx["model_config"])
    block, n_layer = int(config["block_size"]), int(config["n_layer"])
    target, tolerance = float(ctx["target_sparsity"]), float(ctx["sparsity_tolerance"])
    message: dict[str, Any] = {"target_sparsity": target}
    split = str(ctx.get("split", "intermediate"))
    if split not in SPLIT_FILES:
        return {"raw": None, "message": {**message, "error": f"unknown split {split!r}: allowed are "
                                                              f"{', '.join(SPLIT_FILES)}"}, "details": {}}
    data_path = protected / SPLIT_FILES[split]
    if not os.access(data_path, os.R_OK):
        if split != "intermediate":  # only the harness scores the final split, and it can read it
            return {"raw": None, "message": {**message, "error": f"{data_path} is missing or not readable"},
                    "details": {}}
        data_path = home / "data" / "calibration.bin"
        message["note"] = "held-out text not readable here: measured on data/calibration.bin (use the score tool)"
    sparse = sparse_module()
    try:
        plan, confined = plan_in_child(ctx, home, solution, float(ctx.get("plan_timeout_s", 40)))
        model = load_model(home, config)
        sparse_model = copy.deepcopy(model)
        layers = sparse.apply_plan(sparse_model, plan, n_layer)
    except (ChildFailed, ChildTimeout, ValueError, TypeError) as exc:
        return {"raw": None, "message": {**message, "error": str(exc)[:600]}, "details": {}}
    tokens = read_tokens(data_path, int(ctx["eval_sequences"]), block)
    ppl_dense, dense_losses = evaluate(model, tokens)
    ppl_sparse, sparse_losses = evaluate(sparse_model, tokens)
    sparsity = {site: layer.zeros / max(layer.count, 1) for site, layer in layers.items()}
    lowest = min(sparsity, key=lambda site: sparsity[site])
    message.update(ppl_dense=round(ppl_dense, 4), ppl_sparse=round(ppl_sparse, 4),
                   mean_sparsity=round(sum(sparsity.values()) / len(sparsity), 4),
                   lowest_sparsity={lowest: round(sparsity[lowest], 4)})
    details = {"ppl_dense": ppl_dense, "ppl_sparse": ppl_sparse, "sparsity": sparsity, "data": data_path.name,
               "split": split, "plan_confined": confined}
    if sparsity[lowest] < target - tolerance:
        message["error"] = (f"sparsity of {lowest} is {sparsity[lowest]:.4f}, below the target {target} "
                            f"(tolerance {tolerance})")
        return {"raw": None, "message": message, "details": details}
    if not math.isfinite(ppl_sparse):
        return {"raw": None, "message": {**message, "error": "sparse perplexity is not finite"}, "details": details}
    raw = math.log(max(ppl_sparse - ppl_dense, MIN_GAP))
    se = gap_se(ppl_sparse, ppl_dense, sparse_losses, dense_losses)
    # to first order, ln(gap) moves by d(gap) / gap
    details["raw_se"] = None if se is None else se / max(ppl_sparse - ppl_dense, MIN_GAP)
    return {"raw": raw, "message": message, "details": details}


if __name__ == "__main__":
    print(json.dumps(score(direct_context(__file__)), indent=2))
