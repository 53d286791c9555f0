"""A compact next-token training loop for the GPT in model.py (nanoGPT's loop, minus DDP).

Used at build time to train the tiny profile's models, and given to the agent as a
starting point:

    python train.py --init=CKPT --config=CONFIG.json --out=OUT.pth [--steps=500 --lr=1e-3 ...]

Source of truth: rebench/kit/lmtrain.py (the environment kit); the agent's copy, train.py beside
model.py, is made by environments/_common/agent_copies.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch

# The agent's copy (train.py, run as a script beside model.py) imports `model` instead:
# environments/_common/agent_copies.py rewrites this one line.
from .gpt import GPT, GPTConfig


class TokenBatches:
    """Random windows of a uint16 token file, drawn from a seeded generator (reproducible)."""

    def __init__(self, path: str | Path, block_size: int, batch_size: int, seed: int) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.block_size, self.batch_size = block_size, batch_size
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        ix = self.rng.integers(0, len(self.data) - self.block_size - 1, size=self.batch_size)
        x = np.stack([self.data[i:i + self.block_size] for i in ix]).astype(np.int64)
        y = np.stack([self.data[i + 1:i + 1 + self.block_size] for i in ix]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)


@torch.no_grad()
def evaluate(model: GPT, path: str | Path, iters: int, batch_size: int, block_size: int, seed: int = 0,
             device: str = "cpu") -> float:
    """Mean next-token loss over `iters` fixed random batches."""
    was_training = model.training
    model.eval()
    batches = TokenBatches(path, block_size, batch_size, seed)
    total = 0.0
    for _ in range(iters):
        x, y = batches.next()
        _, loss = model(x.to(device), y.to(device))
        total += float(loss)
    model.train(was_training)
    return total / iters


def cosine_lr(step: int, steps: int, lr: float, warmup: int, min_ratio: float = 0.1) -> float:
    if step < warmup:
        return lr * (step + 1) / (warmup + 1)
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def train(
    model: torch.nn.Module,
    data: str | Path,
    *,
    steps: int,
    batch_size: int,
    block_size: int,
    lr: float,
    warmup: int = 20,
    weight_decay: float = 0.1,
    seed: int = 0,
    params: Iterable[torch.nn.Parameter] | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    log_every: int = 0,
    device: str = "cpu",
) -> float:
    """Train `model` (or only `params`) with AdamW and a cosine schedule; return the last loss."""
    batches = TokenBatches(data, block_size, batch_size, seed)
    chosen = [p for p in (params if params is not None else model.parameters()) if p.requires_grad]
    optimizer = torch.optim.AdamW(chosen, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    model.train()
    last = float("nan")
    started = time.time()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, warmup)
        x, y = batches.next()
        x, y = x.to(device), y.to(device)
        loss = loss_fn(x, y) if loss_fn is not None else model(x, y)[1]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(chosen, 1.0)
        optimizer.step()
        last = float(loss.detach())
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step}: loss {last:.4f} ({time.time() - started:.0f}s)", flush=True)
    return last


def save_state(model: GPT, path: str | Path, half: bool = False) -> None:
    """Save the state dict without the tied lm_head copy (it is the embedding)."""
    state = {k: (v.half() if half and v.is_floating_point() else v).clone()
             for k, v in model.state_dict().items() if k != "lm_head.weight"}
    torch.save(state, path)


def load_model(path: str | Path, config: GPTConfig) -> GPT:
    """Strict load (shapes and names must match the config), tensors only; float32 for training."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items() if k != "lm_head.weight"}
    model = GPT(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(f"{path}: architecture mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description="Train a GPT checkpoint on a token file.")
    parser.add_argument("--init", required=True, help="checkpoint to start from (state dict)")
    parser.add_argument("--config", required=True, help="JSON file with the GPTConfig fields")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data", default=os.path.join(os.environ.get("REBENCH_HOME", ".."), "data", "train.bin"))
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--only", default="", help="train only parameters whose name contains this")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = GPTConfig(**json.loads(Path(args.config).read_text()))
    model = load_model(args.init, config)
    params = [p for n, p in model.named_parameters() if args.only in n]
    train(model, args.data, steps=args.steps, batch_size=args.batch_size, block_size=config.block_size,
          lr=args.lr, params=params, log_every=50)
    save_state(model, args.out)


if __name__ == "__main__":
    main()
