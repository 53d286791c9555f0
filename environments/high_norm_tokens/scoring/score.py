"""Scoring for High-Norm Tokens: how well `predict.py` foretells the first token's norm defect.

Called by the rebench scoring helper as `score(ctx)`; run directly (`python score.py`) it
prints a result without logging it (without the protected folder it only runs the prediction).

The agent's predict.py runs only in a confined child (predict_worker.py) that gets the blocks'
weights, never the token or position embedding (no file in the sandbox has them), and
`predict_timeout_s` seconds; it cannot read /protected. Then this process, which runs no agent
code, measures the truth on held-out text with the whole model (protected/model.pth,
measure.py): the layer where the first token's norm ratio first reaches `threshold`, the layer
where it falls back under it, and the mean unit direction of the first token at the explosion.

raw = w_explode * [explode layer exact] + w_decay * [decay layer exact] + w_direction * |cos|
(decay layer n_layer + 1: the norm stays high to
the last block; the profile's `weight_*` params, summing to 1; higher is better). A missing or malformed
prediction is invalid (None).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rebench.kit.buildutil import load_file
from rebench.kit.confined import ChildFailed, ChildTimeout, ConfinedChild
from rebench.kit.context import direct_context
from rebench.kit.gpt import GPT, GPTConfig
from rebench.kit.torch_scoring import prepare

HERE = Path(__file__).resolve().parent


def _measure_module() -> Any:
    """measure.py beside this file (the scoring folder is not a package)."""
    return load_file("high_norm_tokens_measure", HERE / "measure.py")


def predict_in_child(ctx: dict[str, Any], solution: Path, config: dict) -> tuple[dict, bool]:
    """The agent's prediction from predict_worker.py in a confined child; (reply, confined)."""
    source = (HERE / "predict_worker.py").read_text(encoding="utf-8")
    blocks = Path(ctx["home"]) / "blocks.pth"
    child = ConfinedChild(ctx, source, [str(solution), str(blocks), json.dumps(config),
                                        str(int(ctx.get("threads", 1)))], cwd=str(solution), name="predict.py")
    try:
        ready = child.receive()  # torch imported and the blocks loaded, within the call's own limit
        if "error" not in ready:
            child.send({"start": True})
            ready = child.receive(float(ctx["predict_timeout_s"]))
        reply = ready
    finally:
        # A child still running after its time runs as another user on Docker: this process may not
        # kill it (PermissionError); the exec server ends it with the scoring call.
        with contextlib.suppress(PermissionError):
            child.close(grace_s=2.0)
    if "error" in reply:
        raise ChildFailed(str(reply["error"]))
    return reply, child.confined


def check_prediction(reply: dict, n_layer: int, n_embd: int) -> tuple[int, int, torch.Tensor]:
    """The prediction's values, or ValueError naming the bad one and what is allowed."""
    layers = []
    for key, top in (("explode_layer", n_layer), ("decay_layer", n_layer + 1)):
        value = reply.get(key)
        if type(value) is not int or not 1 <= value <= top:
            raise ValueError(f"{key} is {value!r}; allowed: an int from 1 to {top}")
        layers.append(value)
    direction = reply.get("direction")
    if (not isinstance(direction, list) or len(direction) != n_embd
            or not all(type(x) in (int, float) and _finite(x) for x in direction)):
        raise ValueError(f"direction must be {n_embd} finite numbers")
    vector = torch.tensor([float(x) for x in direction], dtype=torch.float64)
    # Scaled to a largest entry of 1 before the norm: squares of entries near 1e-162 fall into
    # float64's subnormal range and round (to zero below about 1.6e-162), so the norm of the vector as
    # given can be far below its length, and a "unit" vector divided by it came out longer than 1
    # (|cos| 1.56 for the reference's direction scaled down: tests/adversarial/test_high_norm_attacks.py).
    largest = float(vector.abs().max())
    if largest == 0.0:
        raise ValueError("direction must not be the zero vector")
    vector = vector / largest
    return layers[0], layers[1], vector / vector.norm()


def _finite(x: int | float) -> bool:
    """Whether x is a finite number a float64 can hold (a JSON integer may have 400 digits)."""
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    _home, solution, protected, _device = prepare(ctx)
    config = dict(ctx["model_config"])
    if not (solution / "predict.py").is_file():
        return {"raw": None, "message": {"error": "no predict.py in the solution folder"}, "details": {}}
    try:
        reply, confined = predict_in_child(ctx, solution, config)
        explode, decay, direction = check_prediction(reply, int(config["n_layer"]), int(config["n_embd"]))
    except (ChildFailed, ChildTimeout, ValueError, OverflowError) as exc:  # Overflow: a reply's 1e999 as a count
        return {"raw": None, "message": {"error": f"invalid prediction: {exc}"[:600]}, "details": {}}
    message: dict[str, Any] = {"explode_layer": explode, "decay_layer": decay}
    model_path, data_path = protected / "model.pth", protected / "heldout.bin"
    if not (os.access(model_path, os.R_OK) and os.access(data_path, os.R_OK)):
        message["note"] = "the model and held-out text are not readable here; use the score tool for the real score"
        return {"raw": None, "message": message, "details": {}}
    measure = _measure_module()
    model = GPT(GPTConfig(**config))
    model.load_state_dict(torch.load(model_path, map_location="cpu", weights_only=True), strict=False)
    tokens = np.fromfile(data_path, dtype="<u2")
    truth = measure.measure(model, measure.windows(tokens, int(ctx["windows"]), int(config["block_size"]), 0),
                            float(ctx["threshold"]))
    if truth.explode_layer is None or truth.direction is None:
        return {"raw": None, "message": {**message, "error": "the model shows no high-norm first token"},
                "details": {"ratios": truth.ratios}}
    weights = {"explode_layer": ctx["weight_explode"], "decay_layer": ctx["weight_decay"],
               "direction": ctx["weight_direction"]}
    # both unit vectors: at most 1 but for rounding, which must not lift a score above the maximum
    cosine = min(1.0, abs(float(direction @ torch.tensor(truth.direction, dtype=torch.float64))))
    true_decay = truth.decay_layer if truth.decay_layer is not None else int(config["n_layer"]) + 1
    parts = {"explode_layer": float(explode == truth.explode_layer),
             "decay_layer": float(decay == true_decay), "direction": cosine}
    raw = sum(float(weights[key]) * value for key, value in parts.items())
    message.update({"explode_layer_correct": bool(parts["explode_layer"]),
                    "decay_layer_correct": bool(parts["decay_layer"]), "abs_cosine": round(cosine, 4)})
    return {"raw": raw, "message": message, "details": {**parts, "predict_confined": confined}}


if __name__ == "__main__":
    print(json.dumps(score(direct_context(__file__)), indent=2))
