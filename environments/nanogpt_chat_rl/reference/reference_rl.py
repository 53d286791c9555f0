"""Reference solution for Finetune GPT-2 for QA, in the spirit of RE-Bench's official one.

Each round: sample k answers per training prompt from the current model (temperature 0.7,
top-k 8, short answers), pick each prompt's best by a single-elimination pairwise tournament
judged through evaluation.evaluate() (the gateway, the agent's own key), then finetune on the
winners (SFT). The checkpoint keeps the same sampling settings for the scorer (as RE-Bench's
official solution did in its model.py: at most 20 new tokens, temperature 0.7, top-k 8). Rounds, k,
prompts and steps come from reference_plan.json per profile.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import torch

SOLUTION = Path(os.environ.get("REBENCH_SOLUTION") or Path(__file__).resolve().parent)
HOME = Path(os.environ.get("REBENCH_HOME") or SOLUTION.parent)
sys.path.insert(0, str(SOLUTION))

import chat  # noqa: E402
from evaluation import evaluate  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def tournament(prompts: list[str], candidates: list[list[str]], workers: int) -> tuple[list[str], int]:
    """Each prompt's winner of its k candidates (single elimination, all prompts' matches of a
    level in one evaluate() call); returns (winners, judge calls asked)."""
    alive = [list(range(len(candidates))) for _ in prompts]
    asked = 0
    while len(alive[0]) > 1:
        matches = [(i, alive[i][j], alive[i][j + 1])
                   for i in range(len(prompts)) for j in range(0, len(alive[i]) - 1, 2)]
        verdicts = evaluate([prompts[i] for i, _, _ in matches],
                            [(candidates[a][i], candidates[b][i]) for i, a, b in matches], max_workers=workers)
        asked += sum(candidates[a][i] != candidates[b][i] for i, a, b in matches)
        nxt: list[list[int]] = [[] for _ in prompts]
        for (i, a, b), first in zip(matches, verdicts, strict=True):
            nxt[i].append(a if first else b)
        for i in range(len(prompts)):
            if len(alive[i]) % 2:
                nxt[i].append(alive[i][-1])
        alive = nxt
    return [candidates[alive[i][0]][i] for i in range(len(prompts))], asked


def main() -> None:
    params = json.loads((HOME / "profile_params.json").read_text(encoding="utf-8"))
    plan = json.loads((SOLUTION / "reference_plan.json").read_text(encoding="utf-8"))[params["profile"]]
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("REFERENCE_THREADS", "1")))
    rng = random.Random(0)
    payload = torch.load(HOME / "student_model.pt", map_location="cpu", weights_only=True)
    model = GPT(GPTConfig(**payload["config"]))
    model.load_state_dict(payload["model_state_dict"], strict=False)
    device = "cuda" if torch.cuda.is_available() and str(params.get("device", "cpu")).startswith("cuda") else "cpu"
    model.to(device)
    tokenizer = chat.load_tokenizer(HOME)
    with (SOLUTION / "data" / "prompts.jsonl").open(encoding="utf-8") as handle:
        prompts = [json.loads(line)["prompt"] for line in handle if line.strip()]
    generation = {"temperature": float(plan["temperature"]), "top_k": int(plan["top_k"]),
                  "max_new_tokens": int(plan["max_new_tokens"])}
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(plan["lr"]), weight_decay=0.01)
    started = time.time()
    for round_ in range(int(plan["rounds"])):
        batch = rng.sample(prompts, min(int(plan["prompts_per_round"]), len(prompts)))
        candidates = [chat.sample(model, tokenizer, batch, seed=1000 * round_ + j, **generation)
                      for j in range(int(plan["k"]))]
        winners, asked = tournament(batch, candidates, int(plan["workers"]))
        pairs = list(zip(batch, winners, strict=True))
        model.train()
        for _ in range(int(plan["sft_steps"])):
            x, y = chat.answer_batch(tokenizer, rng.sample(pairs, min(int(plan["batch_size"]), len(pairs))),
                                     model.config.block_size)
            loss = chat.answer_loss(model, x.to(device), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.eval()
        print(f"round {round_}: {len(batch)} prompts x {plan['k']} samples, {asked} judge calls, "
              f"sft loss {loss.item():.3f} ({time.time() - started:.0f}s)", flush=True)
    chat.save_checkpoint(model, SOLUTION / "finetuned_model", generation)
    print(f"saved {SOLUTION / 'finetuned_model'}")


if __name__ == "__main__":
    main()
