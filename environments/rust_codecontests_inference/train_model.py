"""Train the `tiny`/`ci` profiles' model at build time: `train(out_dir, seed=..., steps=..., ...)`.

A small GPT (pre-LayerNorm, learned positions, tied embeddings, tanh GELU, exactly what
model.py evaluates in numpy) learns `<bos> description <sep> program <eos>` from the
generator's "train" split, with the loss on the program only. PyTorch on the CPU (2 threads);
the result is exported as numpy arrays, a vocabulary and a config in `out_dir`, which
model.load() reads. `python train_model.py --out DIR [--preset tiny]` runs it standalone.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rebench.kit.buildutil import load_file

HERE = Path(__file__).resolve().parent

# Recommended settings per profile (build.py: train(DIR / "model", seed=0, **PRESETS[profile])).
PRESETS: dict[str, dict[str, Any]] = {
    # ~25 s on 2 free cores (minutes when the machine is shared). On 100 validation problems, temperature 1:
    # one sample solves ~16%, best-of-8 with public-test filtering ~42% (benchmarks/rust_model.py).
    "tiny": {"steps": 220, "n_problems": 20000, "d_model": 96, "n_layer": 3, "n_head": 4, "batch_size": 32},
    # A weaker model for CI (~2 min on 2 busy cores): one sample ~7%, best-of-8 filtered ~30% (40 problems).
    "ci": {"steps": 250, "n_problems": 6000, "d_model": 64, "n_layer": 2, "n_head": 4, "batch_size": 32},
}


def _sibling(name: str) -> ModuleType:
    """generator.py / model.py by path: build.py and the gateway load this folder's files by path."""
    return load_file(f"_rust_codecontests_{name}", HERE / f"{name}.py")


class Block(nn.Module):
    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).split(d, dim=-1)
        q, k, v = (a.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for a in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, block_size: int, d: int, n_layer: int, n_head: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block_size, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.lnf = nn.LayerNorm(d)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.lnf(x) @ self.wte.weight.T

    def export(self) -> dict[str, np.ndarray]:
        """The arrays model.py reads (Linear weights transposed to (in, out))."""
        arrays = {"wte": self.wte.weight, "wpe": self.wpe.weight, "lnf.w": self.lnf.weight, "lnf.b": self.lnf.bias}
        for i, block in enumerate(self.blocks):
            for name in ("attn", "proj", "fc", "out"):
                layer = getattr(block, name)
                arrays[f"h{i}.{name}.w"], arrays[f"h{i}.{name}.b"] = layer.weight.T, layer.bias
            for name in ("ln1", "ln2"):
                norm = getattr(block, name)
                arrays[f"h{i}.{name}.w"], arrays[f"h{i}.{name}.b"] = norm.weight, norm.bias
        return {key: value.detach().numpy().astype(np.float32) for key, value in arrays.items()}


def train(
    out_dir: Path,
    *,
    seed: int,
    steps: int,
    n_problems: int = 30000,
    d_model: int = 128,
    n_layer: int = 4,
    n_head: int = 4,
    batch_size: int = 32,
    lr: float = 3e-3,
    block_size: int = 192,
    threads: int = 2,
    log_every: int = 100,
) -> dict[str, Any]:
    """Train on `n_problems` generated training problems for `steps` steps; write the model to `out_dir`."""
    generator, model_mod = _sibling("generator"), _sibling("model")
    started = time.monotonic()
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    problems = generator.generate("train", n_problems, seed)
    tokenizer = model_mod.Tokenizer.build([p["description"] for p in problems] + [p["solution"] for p in problems])
    eos = tokenizer.index[model_mod.EOS]
    rows = []
    for p in problems:
        prompt = tokenizer.prompt_ids(p["description"])
        code = [*tokenizer.encode(p["solution"]), eos]
        if len(prompt) + len(code) <= block_size:
            rows.append((prompt, code))
    net = GPT(len(tokenizer.vocab), block_size, d_model, n_layer, n_head)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    order = torch.Generator().manual_seed(seed)
    warmup = max(1, steps // 20)
    losses: list[float] = []
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in optimizer.param_groups:
            group["lr"] = lr * max(scale, 0.02)
        batch = [rows[i] for i in torch.randint(len(rows), (batch_size,), generator=order).tolist()]
        width = max(len(a) + len(b) for a, b in batch)
        ids = torch.zeros((batch_size, width), dtype=torch.long)
        target = torch.full((batch_size, width), -100, dtype=torch.long)
        for row, (prompt, code) in enumerate(batch):
            seq = prompt + code
            ids[row, : len(seq)] = torch.tensor(seq)
            target[row, len(prompt) - 1 : len(seq) - 1] = torch.tensor(code)
        logits = net(ids)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            recent = sum(losses[-log_every:]) / log_every
            print(f"step {step + 1}/{steps} loss {recent:.4f} {time.monotonic() - started:.0f}s", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez(out_dir / "weights.npz", **net.export())  # type: ignore[arg-type]
    (out_dir / "vocab.json").write_text(json.dumps(tokenizer.vocab))
    config = {"name": "rust-tiny", "n_layer": n_layer, "n_head": n_head, "d_model": d_model,
              "block_size": block_size, "vocab_size": len(tokenizer.vocab), "seed": seed, "steps": steps,
              "n_problems": n_problems, "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:]))}
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return {**config, "train_seconds": round(time.monotonic() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    settings = dict(PRESETS[args.preset])
    if args.steps is not None:
        settings["steps"] = args.steps
    print(json.dumps(train(args.out, seed=args.seed, **settings)))


if __name__ == "__main__":
    main()
