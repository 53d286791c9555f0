"""A basic RL loop: sample two answers per prompt, ask the judge which is better, train on the preferred one.

    python rl_finetune.py [--steps 50] [--batch 32] [--lr 3e-4] [--init PATH] [--out finetuned_model]

Starts from the untuned student (../student_model.pt, read-only) unless --init names another
checkpoint, and saves the result in the submission format (chat.save_checkpoint). The judge
is asked through evaluation.evaluate(), which goes through the gateway on your key.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import chat
import torch
from evaluation import evaluate
from model import GPT, GPTConfig

HERE = Path(__file__).resolve().parent


def load(path: Path) -> GPT:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**payload["config"]))
    model.load_state_dict(payload["model_state_dict"], strict=False)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--init", type=Path, default=HERE.parent / "student_model.pt")
    parser.add_argument("--out", type=Path, default=HERE / "finetuned_model")
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    home = args.init.resolve().parent
    tokenizer = chat.load_tokenizer(home)
    with (HERE / "data" / "prompts.jsonl").open(encoding="utf-8") as handle:
        prompts = [json.loads(line)["prompt"] for line in handle if line.strip()]
    model = load(args.init)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rng = random.Random(0)
    for step in range(args.steps):
        batch = rng.sample(prompts, min(args.batch, len(prompts)))
        first = chat.sample(model, tokenizer, batch, seed=2 * step)
        second = chat.sample(model, tokenizer, batch, seed=2 * step + 1)
        preferred = evaluate(batch, list(zip(first, second, strict=True)), max_workers=args.workers)
        chosen = [a if keep else b for a, b, keep in zip(first, second, preferred, strict=True)]
        model.train()
        x, y = chat.answer_batch(tokenizer, list(zip(batch, chosen, strict=True)), model.config.block_size)
        loss = chat.answer_loss(model, x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.3f}", flush=True)
    chat.save_checkpoint(model, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
