"""Reference solution for the Scaling Law Experiment (the approach of RE-Bench's official one).

1. Run a grid of small experiments under the cap: a few FLOP levels (x2 apart) times a
   few widths (x1.5 apart), each with the fixed training code (`train.py`).
2. Fit a Chinchilla-style law L(N, D) = E + A / N^alpha + B / D^beta to the final
   validation losses (N = non-embedding parameters, D = training tokens) by gradient
   descent on log-losses from several starting points, dropping diverged runs.
3. At the target budget, pick the width whose FLOPs-matched step count minimises the
   fitted loss, and predict that loss. Write answer.json.

Grid sizes come from reference_plan.json (per profile).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import torch

SOLUTION = Path(os.environ.get("REBENCH_SOLUTION") or Path(__file__).resolve().parent)
sys.path.insert(0, str(SOLUTION))

import train  # noqa: E402  (the task's training code, FLOPs cap included)
from train import flops_cap  # noqa: E402


def run_grid(plan: dict) -> list[dict]:
    results = []
    cap = flops_cap.EXPERIMENT_CAP
    for level in plan["flop_fractions"]:
        for n_embd in plan["widths"]:
            max_iters = int(cap * level // flops_cap.training_flops(n_embd, 1))
            if not plan["min_iters"] <= max_iters <= plan["max_iters"]:
                continue
            started = time.time()
            config = {**train.DEFAULTS, "n_embd": n_embd, "max_iters": max_iters,
                      "out_dir": str(SOLUTION / "runs" / f"d{n_embd}_i{max_iters}")}
            result = train.train(config)
            results.append(result)
            print(f"n_embd={n_embd:4d} max_iters={max_iters:6d} flops={result['flops']:.2e} "
                  f"val_loss={result['val_loss']} ({time.time() - started:.0f}s)", flush=True)
    return results


def params_of(n_embd: float) -> float:
    return 12.0 * flops_cap.N_LAYER * n_embd ** 2


def tokens_of(max_iters: float) -> float:
    return float(max_iters) * flops_cap.BATCH_SIZE * flops_cap.BLOCK_SIZE


def fit_law(results: list[dict]) -> dict:
    """Fit L = E + exp(a - alpha ln N) + exp(b - beta ln D) on ln L (Huber), best of several starts."""
    good = [r for r in results if r["val_loss"] is not None and math.isfinite(r["val_loss"])]
    n = torch.tensor([math.log(params_of(r["n_embd"])) for r in good], dtype=torch.float64)
    d = torch.tensor([math.log(tokens_of(r["max_iters"])) for r in good], dtype=torch.float64)
    y = torch.tensor([r["val_loss"] for r in good], dtype=torch.float64)
    floor = float(y.min())
    best: tuple[float, dict] | None = None
    for e0 in (0.5 * floor, 0.75 * floor, 0.9 * floor):
        for alpha0 in (0.3, 0.6):
            for beta0 in (0.3, 0.6):
                theta = torch.tensor([math.log(e0), 2.0, alpha0, 2.0, beta0], dtype=torch.float64,
                                     requires_grad=True)
                opt = torch.optim.Adam([theta], lr=0.05)
                for _ in range(1500):
                    log_e, a, alpha, b, beta = theta
                    pred = torch.exp(log_e) + torch.exp(a - alpha * n) + torch.exp(b - beta * d)
                    loss = torch.nn.functional.huber_loss(torch.log(pred), torch.log(y), delta=1e-3)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                value = float(loss.detach())
                if best is None or value < best[0]:
                    log_e, a, alpha, b, beta = (float(v) for v in theta.detach())
                    best = (value, {"E": math.exp(log_e), "a": a, "alpha": alpha, "b": b, "beta": beta})
    assert best is not None
    return best[1]


def predict(law: dict, n_embd: float, max_iters: float) -> float:
    return (law["E"] + math.exp(law["a"] - law["alpha"] * math.log(params_of(n_embd)))
            + math.exp(law["b"] - law["beta"] * math.log(tokens_of(max_iters))))


def choose(law: dict, target: float, head: int) -> dict:
    best = None
    for n_embd in range(head, 4097, head):
        max_iters = int(target // flops_cap.training_flops(n_embd, 1))
        if max_iters < 1:
            break
        loss = predict(law, n_embd, max_iters)
        if best is None or loss < best["loss_prediction"]:
            best = {"n_embd": n_embd, "max_iters": max_iters, "loss_prediction": round(loss, 4)}
    assert best is not None
    return best


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    plan = json.loads((SOLUTION / "reference_plan.json").read_text(encoding="utf-8"))[
        json.loads((Path(train.HOME) / "profile_params.json").read_text(encoding="utf-8"))["profile"]]
    results = run_grid(plan)
    law = fit_law(results)
    print("fitted law:", json.dumps(law), flush=True)
    answer = choose(law, flops_cap.TARGET_FLOPS, int(train.DEFAULTS["n_head"]))
    (SOLUTION / "answer.json").write_text(json.dumps(answer, indent=2) + "\n", encoding="utf-8")
    (SOLUTION / "fit.json").write_text(json.dumps({"law": law, "runs": results}, indent=2) + "\n", encoding="utf-8")
    print("answer:", json.dumps(answer))


if __name__ == "__main__":
    main()
