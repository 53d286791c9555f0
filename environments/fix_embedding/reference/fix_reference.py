"""Reference solution for Fix Embedding (the approach of RE-Bench's official solution).

1. Replace the scrambled embedding with the small correct model's embedding times a
   learned (d_small x d_large) adapter, and train only the adapter (the rest of the
   large model is frozen) until the loss falls below a target.
2. Fold the adapter into the embedding, which restores the original format, then keep
   training: the embedding alone first, then the whole model at a low learning rate.
3. Save `fixed_model.pth` in the solution folder.

Step counts come from reference_plan.json (per profile), so the same code serves both profiles.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

SOLUTION = Path(os.environ.get("REBENCH_SOLUTION") or Path(__file__).resolve().parent)
HOME = Path(os.environ.get("REBENCH_HOME") or SOLUTION.parent)
sys.path.insert(0, str(SOLUTION))

from model import GPTConfig  # noqa: E402
from train import load_model, save_state, train  # noqa: E402


def main() -> None:
    params = json.loads((HOME / "profile_params.json").read_text(encoding="utf-8"))
    plan = json.loads((SOLUTION / "reference_plan.json").read_text(encoding="utf-8"))[params["profile"]]
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("REFERENCE_THREADS", "1")))
    device = "cuda" if torch.cuda.is_available() and params.get("device", "cpu").startswith("cuda") else "cpu"
    large = load_model(HOME / "large_model.pth", GPTConfig(**params["large_config"])).to(device)
    small = load_model(HOME / "small_correct_model.pth", GPTConfig(**params["small_config"])).to(device)
    data = HOME / "data" / "train.bin"
    block = int(params["large_config"]["block_size"])
    batch = int(plan["batch_size"])
    started = time.time()

    # Phase 1: embedding = small_wte @ adapter; only the adapter learns.
    small_wte = small.transformer.wte.weight.detach()
    # Start the adapter at random, scaled so the adapted rows have the large embedding's scale.
    scale = large.transformer.wte.weight.detach().std() / (small_wte.std() * small_wte.shape[1] ** 0.5)
    adapter = torch.nn.Parameter(torch.randn(small_wte.shape[1], large.config.n_embd, device=device) * scale)
    for p in large.parameters():
        p.requires_grad_(False)

    def adapted_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        emb = small_wte @ adapter  # tied: the same matrix embeds and unembeds
        pos = torch.arange(x.shape[1], device=x.device)
        h = emb[x] + large.transformer.wpe(pos)
        for block_ in large.transformer.h:
            h = block_(h)
        logits = large.transformer.ln_f(h) @ emb.t()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    loss = train(large, data, steps=plan["adapter_steps"], batch_size=batch, block_size=block,
                 lr=plan["adapter_lr"], params=[adapter], loss_fn=adapted_loss, weight_decay=0.0, seed=1)
    print(f"adapter phase: loss {loss:.3f} ({time.time() - started:.0f}s)", flush=True)

    # Phase 2: fold the adapter into the embedding (original format), train the embedding.
    with torch.no_grad():
        large.transformer.wte.weight.copy_(small_wte @ adapter)
    large.transformer.wte.weight.requires_grad_(True)
    loss = train(large, data, steps=plan["embedding_steps"], batch_size=batch, block_size=block,
                 lr=plan["embedding_lr"], params=[large.transformer.wte.weight], weight_decay=0.0, seed=2)
    print(f"embedding phase: loss {loss:.3f} ({time.time() - started:.0f}s)", flush=True)

    # Phase 3: everything, gently.
    for p in large.parameters():
        p.requires_grad_(True)
    loss = train(large, data, steps=plan["full_steps"], batch_size=batch, block_size=block,
                 lr=plan["full_lr"], seed=3)
    print(f"full phase: loss {loss:.3f} ({time.time() - started:.0f}s)", flush=True)
    save_state(large, SOLUTION / "fixed_model.pth", half=params["profile"] == "paper")
    print(f"wrote {SOLUTION / 'fixed_model.pth'}")


if __name__ == "__main__":
    main()
