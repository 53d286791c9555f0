"""Reference solution for Fix Embedding.

`paper` (the approach of RE-Bench's official solution, plan method "adapter"):
1. Replace the scrambled embedding with the small correct model's embedding times a
   learned (d_small x d_large) adapter, and train only the adapter (the rest of the
   large model is frozen) until the loss falls below a target.
2. Fold the adapter into the embedding, which restores the original format, then keep
   training: the embedding alone first, then the whole model at a low learning rate.

`tiny` (plan method "match"): the scrambled rows are the original rows in another order, so
find the order. Each model's next-token log-probabilities after every single token form a
vocabulary x vocabulary table: the small model's is indexed by token ids, the large model's
by scrambled rows on both axes. Pair the two tables' entries by frequency first, then
repeatedly pair every token with the row whose predictions to and from the paired tokens
correlate best with the token's own, until the pairing stops changing. A few runs, each started
from a different number of frequency-paired anchors, and the pairing whose tables agree best is
kept. No training at all.

Either way, save `fixed_model.pth` in the solution folder. Step counts and the method come
from reference_plan.json (per profile), so the same code serves both profiles.
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


@torch.no_grad()
def next_token_table(model: torch.nn.Module, vocab: int) -> torch.Tensor:
    """log P(next | a one-token context), for every token (or scrambled row) as the context."""
    model.eval()
    tokens = torch.arange(vocab, device=next(model.parameters()).device).unsqueeze(1)
    return torch.cat([torch.log_softmax(model(chunk)[0][:, -1].float(), dim=-1) for chunk in tokens.split(256)])


def pair_up(similarity: torch.Tensor) -> torch.Tensor:
    """A one-to-one pairing of rows to columns, best first: every round pairs the row and column
    that are each other's best remaining choice (the best remaining pair always is)."""
    sim = similarity.clone()
    out = torch.full((sim.shape[0],), -1, dtype=torch.long)
    rows = torch.arange(sim.shape[0])
    while bool((out < 0).any()):
        best_col = sim.argmax(1)
        mutual = (sim.argmax(0)[best_col] == rows) & (out < 0)
        out[mutual] = best_col[mutual]
        sim[mutual] = float("-inf")
        sim[:, best_col[mutual]] = float("-inf")
    return out


def standardized(table: torch.Tensor) -> torch.Tensor:
    table = table - table.mean(1, keepdim=True)
    return table / table.std(1, keepdim=True).clamp_min(1e-8)


def agreement(known: torch.Tensor, scrambled: torch.Tensor, rows: torch.Tensor) -> float:
    """How well the large model's table, with its rows and columns put in token order by `rows`,
    correlates with the small model's: near 0 for a wrong pairing, far above it for the right one."""
    reordered = scrambled[rows][:, rows]
    return float((standardized(known - known.mean(1, keepdim=True))
                  * standardized(reordered - reordered.mean(1, keepdim=True))).mean())


def match_from(known: torch.Tensor, scrambled: torch.Tensor, seeds: int, max_rounds: int) -> torch.Tensor:
    """One matching run whose first anchors are the `seeds` most frequent tokens, paired by rank."""
    vocab = known.shape[0]

    def frequencies(table: torch.Tensor) -> torch.Tensor:
        pi = torch.full((vocab,), 1.0 / vocab)
        for _ in range(200):
            pi = pi @ table.exp()
        return pi

    by_frequency = torch.argsort(frequencies(known), descending=True)
    rows = torch.empty(vocab, dtype=torch.long)
    rows[by_frequency] = torch.argsort(frequencies(scrambled), descending=True)
    known = known - known.mean(1, keepdim=True)
    scrambled = scrambled - scrambled.mean(1, keepdim=True)
    stable = 0
    for round_ in range(max_rounds):
        anchors = by_frequency[:min(vocab, seeds * 2 ** round_)]  # the most frequent pairs first
        mine = torch.cat([known[:, anchors], known[anchors].t()], 1)
        theirs = torch.cat([scrambled[:, rows[anchors]], scrambled[rows[anchors]].t()], 1)
        new = pair_up(standardized(mine) @ standardized(theirs).t())
        stable = stable + 1 if torch.equal(new, rows) and len(anchors) == vocab else 0
        rows = new
        if stable == 2:
            break
    return rows


def match_rows(large: torch.nn.Module, small: torch.nn.Module, vocab: int,
               seed_counts: tuple[int, ...] = (20, 10, 40, 5, 80), max_rounds: int = 30) -> torch.Tensor:
    """rows[t] = the scrambled embedding row that belongs to token t.

    The small model ranks tokens of near-equal frequency in an order of its own, so a run whose
    first anchors include such a swap can lock onto a wrong pairing; runs from a few different
    anchor counts, keeping the pairing whose tables agree best, do not depend on that luck."""
    known = next_token_table(small, vocab).cpu()      # token -> token
    scrambled = next_token_table(large, vocab).cpu()  # row -> row
    best, best_agreement = None, float("-inf")
    for seeds in seed_counts:
        rows = match_from(known, scrambled, seeds, max_rounds)
        score = agreement(known, scrambled, rows)
        print(f"matching from {seeds} anchors: agreement {score:.3f}", flush=True)
        if score > best_agreement:
            best, best_agreement = rows, score
    assert best is not None
    return best


def main() -> None:
    params = json.loads((HOME / "profile_params.json").read_text(encoding="utf-8"))
    plan = json.loads((SOLUTION / "reference_plan.json").read_text(encoding="utf-8"))[params["profile"]]
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("REFERENCE_THREADS", "1")))
    device = "cuda" if torch.cuda.is_available() and params.get("device", "cpu").startswith("cuda") else "cpu"
    large = load_model(HOME / "large_model.pth", GPTConfig(**params["large_config"])).to(device)
    small = load_model(HOME / "small_correct_model.pth", GPTConfig(**params["small_config"])).to(device)
    data = HOME / "data" / "train.bin"
    if plan.get("method") == "match":
        started = time.time()
        rows = match_rows(large, small, large.config.vocab_size)
        with torch.no_grad():
            large.transformer.wte.weight.copy_(large.transformer.wte.weight[rows.to(device)].clone())
        print(f"rows matched ({time.time() - started:.0f}s)", flush=True)
        save_state(large, SOLUTION / "fixed_model.pth")
        print(f"wrote {SOLUTION / 'fixed_model.pth'}")
        return
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
                 lr=plan["adapter_lr"], params=[adapter], loss_fn=adapted_loss, weight_decay=0.0, seed=1, device=device)
    print(f"adapter phase: loss {loss:.3f} ({time.time() - started:.0f}s)", flush=True)

    # Phase 2: fold the adapter into the embedding (original format), train the embedding.
    with torch.no_grad():
        large.transformer.wte.weight.copy_(small_wte @ adapter)
    large.transformer.wte.weight.requires_grad_(True)
    loss = train(large, data, steps=plan["embedding_steps"], batch_size=batch, block_size=block,
                 lr=plan["embedding_lr"], params=[large.transformer.wte.weight], weight_decay=0.0, seed=2,
                 device=device)
    print(f"embedding phase: loss {loss:.3f} ({time.time() - started:.0f}s)", flush=True)

    # Phase 3: everything, gently.
    for p in large.parameters():
        p.requires_grad_(True)
    loss = train(large, data, steps=plan["full_steps"], batch_size=batch, block_size=block,
                 lr=plan["full_lr"], seed=3, device=device)
    print(f"full phase: loss {loss:.3f} ({time.time() - started:.0f}s)", flush=True)
    save_state(large, SOLUTION / "fixed_model.pth", half=params["profile"] == "paper")
    print(f"wrote {SOLUTION / 'fixed_model.pth'}")


if __name__ == "__main__":
    main()
