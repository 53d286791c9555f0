"""Train the fixed small GPT of the Scaling Law Experiment (nanoGPT-style).

    python train.py [config.py] [--key=value ...]

A config file is plain Python assigning any of the settings below; `--key=value`
overrides come after it (e.g. `python train.py example_config.py --n_embd=64`).
Only `n_embd` and `max_iters` are yours to choose; every other setting, and the
code, is fixed by the task (you may add logging). n_layer, block_size and
batch_size come from the task's constants and cannot be configured.

Before training starts, the run's FLOPs are checked against the experiment cap in
`flops_cap.py` (in your home folder, read-only); a run over the cap is refused.
The final validation loss and the run's FLOPs are written to `out_dir/result.json`.
"""

from __future__ import annotations

import ast
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("REBENCH_HOME") or HERE.parent)
sys.path.insert(0, str(HOME))
sys.path.insert(0, str(HERE))

import flops_cap  # noqa: E402  (read-only, in the home folder)
from model import GPT, GPTConfig  # noqa: E402

DEFAULTS: dict[str, object] = {
    # yours to choose
    "n_embd": 64,
    "max_iters": 500,
    # fixed by the task
    "n_head": flops_cap.CONSTANTS["n_head"],
    "learning_rate": flops_cap.CONSTANTS["learning_rate"],
    "min_lr_ratio": 0.1,
    "warmup_iters": flops_cap.CONSTANTS["warmup_iters"],
    "weight_decay": 0.1,
    "beta1": 0.9,
    "beta2": 0.95,
    "grad_clip": 1.0,
    "eval_iters": flops_cap.CONSTANTS["eval_iters"],
    "seed": 1337,
    # where things are and how to run
    "data_dir": str(HOME / "data"),
    "out_dir": str(HERE / "out"),
    "device": flops_cap.CONSTANTS["device"],
    "threads": 1,
    "log_interval": 0,
}


def parse_config(argv: list[str]) -> dict[str, object]:
    """nanoGPT's configurator, minus `exec` of arbitrary overrides: a config file, then --key=value."""
    config = dict(DEFAULTS)
    for arg in argv:
        if not arg.startswith("--"):
            scope: dict[str, object] = {}
            exec(Path(arg).read_text(encoding="utf-8"), scope)  # a config file is trusted Python
            config.update({k: v for k, v in scope.items() if k in DEFAULTS})
            unknown = [k for k in scope if not k.startswith("__") and k not in DEFAULTS]
            if unknown:
                raise SystemExit(f"unknown setting(s) in {arg}: {', '.join(unknown)}")
            continue
        key, _, value = arg[2:].partition("=")
        if key not in DEFAULTS:
            raise SystemExit(f"unknown setting --{key}; allowed: {', '.join(DEFAULTS)}")
        try:
            config[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            config[key] = value
    return config


def get_lr(it: int, config: dict) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * learning_rate at max_iters."""
    lr, warmup, total = float(config["learning_rate"]), int(config["warmup_iters"]), int(config["max_iters"])
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    progress = (it - warmup) / max(1, total - warmup)
    min_lr = lr * float(config["min_lr_ratio"])
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))) * (lr - min_lr)


class Batches:
    """Random windows of the token stream (nanoGPT's get_batch), from a seeded generator."""

    def __init__(self, path: Path, seed: int) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def get(self, batch_size: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        ix = self.rng.integers(0, len(self.data) - block_size - 1, size=batch_size)
        x = np.stack([self.data[i:i + block_size] for i in ix]).astype(np.int64)
        y = np.stack([self.data[i + 1:i + 1 + block_size] for i in ix]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def evaluate(model: GPT, data_dir: Path, eval_iters: int, device: str) -> float:
    """Mean loss over a fixed set of validation windows (the same for every run)."""
    model.eval()
    batches = Batches(data_dir / "val.bin", seed=0)
    losses = []
    for _ in range(eval_iters):
        x, y = batches.get(flops_cap.BATCH_SIZE, flops_cap.BLOCK_SIZE)
        _, loss = model(x.to(device), y.to(device))
        losses.append(float(loss))
    model.train()
    return float(np.mean(losses))


def train(config: dict, cap: float = flops_cap.EXPERIMENT_CAP) -> dict:
    n_embd, max_iters = int(config["n_embd"]), int(config["max_iters"])
    if n_embd <= 0 or max_iters <= 0 or n_embd % int(config["n_head"]) != 0:
        raise SystemExit(f"n_embd must be a positive multiple of n_head={config['n_head']} "
                         f"and max_iters positive; got n_embd={n_embd}, max_iters={max_iters}")
    flops = flops_cap.approve_run(n_embd, max_iters, cap=cap)
    guard = flops_cap.StepGuard(max_iters)
    torch.manual_seed(int(config["seed"]))
    torch.set_num_threads(int(config["threads"]))
    device = str(config["device"])
    data_dir = Path(str(config["data_dir"]))
    meta = json.loads((data_dir / "meta.json").read_text(encoding="utf-8"))
    model_config = GPTConfig(block_size=flops_cap.BLOCK_SIZE, vocab_size=int(meta["vocab_size"]),
                             n_layer=flops_cap.N_LAYER, n_head=int(config["n_head"]), n_embd=n_embd, bias=False)
    model = GPT(model_config).to(device)
    optimizer = model.configure_optimizer(float(config["weight_decay"]), float(config["learning_rate"]),
                                          (float(config["beta1"]), float(config["beta2"])))
    batches = Batches(data_dir / "train.bin", seed=int(config["seed"]))
    started = time.time()
    train_loss = float("nan")
    log_interval = int(config["log_interval"])
    for it in range(max_iters):
        for group in optimizer.param_groups:
            group["lr"] = get_lr(it, config)
        x, y = batches.get(flops_cap.BATCH_SIZE, flops_cap.BLOCK_SIZE)
        _, loss = model(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if float(config["grad_clip"]) > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), float(config["grad_clip"]))
        optimizer.step()
        guard.step()
        train_loss = float(loss.detach())
        if log_interval and (it % log_interval == 0 or it == max_iters - 1):
            print(f"iter {it}: train loss {train_loss:.4f}, {time.time() - started:.1f}s", flush=True)
        if not math.isfinite(train_loss):
            break
    val_loss = evaluate(model, data_dir, int(config["eval_iters"]), device) if math.isfinite(train_loss) else None
    result = {"n_embd": n_embd, "max_iters": max_iters, "flops": flops, "train_loss": train_loss,
              "val_loss": val_loss, "seconds": round(time.time() - started, 2)}
    out_dir = Path(str(config["out_dir"]))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    outcome = train(parse_config(sys.argv[1:]))
    print(json.dumps(outcome))
