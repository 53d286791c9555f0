"""Restricted MLM's tiny corpus, searched (issue 25, item 11): for a candidate source, what the
context shortcuts and the reference conv net reach, in one process, normalized like the scorer.

    python -m benchmarks.mlm_source_search [--classes 8] [--scale 3] [--class-scale 0.7] [--vocab 256]
        [--train-tokens 2000000] [--conv-steps 200,200,250] [--conv-lr 0.01] [--table-steps 1000]
        [--pair-steps 300] [--skip conv,tables,pair] [--default-source]

Builds the candidate `InteractionSourceSpec`'s train and held-out streams (the build's stream seeds)
in a temporary folder, computes the masked floor (`masked_entropy_bound`) and the unigram loss (the
per-token start's limit), then trains: four neighbour lookup tables (as benchmarks/shortcut_solutions.py,
300 steps and --table-steps), pair tables (a * V + b for the neighbour pairs (-2,-1), (-1,+1), (+1,+2),
plus the four single tables) and the reference conv net (reference/model.py, train_reference.py's loop
with the given plan). Each is evaluated on the scorer's held-out batches; normalized uses the unigram
loss as the start (the starting MLP scores within 0.02 of it) and the conv net as the reference. With
the defaults (the tiny corpus): conv net 3.049, tables 0.12 (300 steps) and 0.09 (1000), pair tables
0.15 (300). One thread; about 4 minutes on a busy core.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from rebench.kit import corpus

ENV = Path(__file__).resolve().parents[1] / "environments" / "restricted_mlm"
sys.path.insert(0, str(ENV / "workspace"))
sys.path.insert(0, str(ENV / "reference"))
sys.path.insert(0, str(ENV / "scoring"))

from mlm_data import MaskedBatches, masked_loss  # noqa: E402
from model import ConvBlock, build_model  # noqa: E402  (reference/model.py comes first on the path)

SEQ, MASK_PROB, EVAL_BATCHES, EVAL_BATCH = 64, 0.15, 100, 16


def heldout_batches(path: Path, mask_id: int):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    rng = np.random.Generator(np.random.PCG64(0))
    for _ in range(EVAL_BATCHES):
        ix = rng.integers(0, len(data) - SEQ, size=EVAL_BATCH)
        tokens = np.stack([data[i:i + SEQ] for i in ix]).astype(np.int64)
        mask = rng.random(tokens.shape) < MASK_PROB
        yield torch.from_numpy(np.where(mask, mask_id, tokens)), torch.from_numpy(tokens), torch.from_numpy(mask)


@torch.no_grad()
def evaluate(model: torch.nn.Module, path: Path, mask_id: int) -> float:
    total, count = 0.0, 0
    for inputs, targets, mask in heldout_batches(path, mask_id):
        rows = model(inputs)[mask]
        total += float(torch.nn.functional.cross_entropy(rows, targets[mask], reduction="sum"))
        count += int(mask.sum())
    return total / count


def shifted(tokens: torch.Tensor, offset: int, pad_id: int) -> torch.Tensor:
    pad = torch.full_like(tokens[:, :abs(offset)], pad_id)
    if offset < 0:
        return torch.cat([pad, tokens[:, :offset]], 1)
    return torch.cat([tokens[:, offset:], pad], 1)


class Tables(torch.nn.Module):
    """One V x V table per neighbour offset, and optionally one V*V x V table per neighbour pair."""

    def __init__(self, vocab: int, pad_id: int, pairs: tuple[tuple[int, int], ...] = ()) -> None:
        super().__init__()
        self.vocab, self.pad_id, self.pairs = vocab, pad_id, pairs
        self.offsets = (-2, -1, 1, 2)
        self.single = torch.nn.ModuleList(torch.nn.Embedding(vocab, vocab) for _ in self.offsets)
        self.pair = torch.nn.ModuleList(torch.nn.Embedding(vocab * vocab, vocab, sparse=True) for _ in pairs)
        for table in [*self.single, *self.pair]:
            torch.nn.init.zeros_(table.weight)
        self.bias = torch.nn.Parameter(torch.zeros(vocab))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.bias
        for offset, table in zip(self.offsets, self.single, strict=True):
            logits = logits + table(shifted(tokens, offset, self.pad_id))
        for (first, second), table in zip(self.pairs, self.pair, strict=True):
            index = shifted(tokens, first, self.pad_id) * self.vocab + shifted(tokens, second, self.pad_id)
            logits = logits + table(index)
        return logits


def train_tables(model: Tables, train: Path, mask_id: int, steps: int, lr: float = 0.03) -> None:
    dense = [p for name, p in model.named_parameters() if not name.startswith("pair.")]
    sparse = [p for name, p in model.named_parameters() if name.startswith("pair.")]
    optimizers = [torch.optim.Adam(dense, lr=lr)] + ([torch.optim.SparseAdam(sparse, lr=lr)] if sparse else [])
    batches = MaskedBatches(train, SEQ, 32, MASK_PROB, mask_id, 0)
    for _ in range(steps):
        inputs, targets, mask = batches.next()
        loss = masked_loss(model(inputs), targets, mask)
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in optimizers:
            opt.step()


def train_conv(vocab: int, train: Path, mask_id: int, stages: list[int], width: int, hidden: int,
               lr: float, batch: int) -> torch.nn.Module:
    """train_reference.py's loop, inlined with the plan given here."""
    torch.manual_seed(0)
    model = build_model({"vocab_size": vocab, "width": width, "layers": 2, "kernel": 5, "hidden": hidden})
    batches = MaskedBatches(train, SEQ, batch, MASK_PROB, mask_id, seed=1)
    total, step = sum(stages), 0
    for layers, steps in zip(range(2, 2 + len(stages)), stages, strict=True):
        while len(model.blocks) < layers:
            block = ConvBlock(width, 5, hidden, 0.5)
            torch.nn.init.zeros_(block.proj.weight)
            torch.nn.init.zeros_(block.proj.bias)
            model.blocks.append(block)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        for _ in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = lr * max(0.1, 1 - step / total)
            inputs, targets, mask = batches.next()
            loss = masked_loss(model(inputs), targets, mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--scale", type=float, default=3.0)
    parser.add_argument("--additive", type=float, default=0.3)
    parser.add_argument("--classes", type=int, default=8)
    parser.add_argument("--class-scale", type=float, default=0.7)
    parser.add_argument("--default-source", action="store_true", help="the kit's default SourceSpec")
    parser.add_argument("--train-tokens", type=int, default=2_000_000)
    parser.add_argument("--table-steps", type=int, default=1000)
    parser.add_argument("--pair-steps", type=int, default=300)
    parser.add_argument("--conv-steps", default="200,200,250")
    parser.add_argument("--conv-width", type=int, default=64)
    parser.add_argument("--conv-hidden", type=int, default=128)
    parser.add_argument("--conv-lr", type=float, default=1e-2)
    parser.add_argument("--conv-batch", type=int, default=32)
    parser.add_argument("--skip", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    skip = set(args.skip.split(","))
    if args.default_source:
        spec: corpus.SourceSpec = corpus.SourceSpec()
    else:
        spec = corpus.InteractionSourceSpec(vocab_size=args.vocab, interaction_scale=args.scale,
                                            prev_scale=args.additive, prev2_scale=args.additive,
                                            classes=args.classes, class_scale=args.class_scale)
    vocab, mask_id = spec.vocab_size, spec.eot
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        train, held = Path(tmp) / "train.bin", Path(tmp) / "heldout.bin"
        corpus.write_bin(train, corpus.generate(spec, args.train_tokens, stream_seed=21))
        corpus.write_bin(held, corpus.generate(spec, 100_000, stream_seed=23))
        floor, stderr = corpus.masked_entropy_bound(spec, n_samples=20000)
        rate = corpus.entropy_rate(spec)
        counts = np.bincount(np.fromfile(train, dtype=np.uint16), minlength=vocab) + 0.5
        unigram = torch.nn.Parameter(torch.tensor(np.log(counts / counts.sum()), dtype=torch.float32))
        start_loss = evaluate(lambda x: x.unsqueeze(-1) * 0.0 + unigram, held, mask_id)
        print(f"{spec}\nfloor {floor:.4f} +- {stderr:.4f}, entropy rate {rate:.4f}, unigram loss {start_loss:.4f}"
              f" ({time.time() - started:.0f}s)", flush=True)
        start = np.log(start_loss - floor)

        def report(name: str, loss: float, reference: float | None = None) -> None:
            raw = np.log(loss - floor) if loss > floor else float("-inf")
            text = f"  {name}: loss {loss:.4f}, raw {raw:.4f}, gain {start - raw:.3f}"
            if reference is not None:
                text += f", normalized {(start - raw) / (start - reference):.3f}"
            print(text + f" ({time.time() - started:.0f}s)", flush=True)

        conv_raw = None
        if "conv" not in skip:
            stages = [int(s) for s in args.conv_steps.split(",")]
            model = train_conv(vocab, train, mask_id, stages, args.conv_width, args.conv_hidden, args.conv_lr,
                               args.conv_batch)
            loss = evaluate(model, held, mask_id)
            conv_raw = float(np.log(loss - floor))
            report(f"conv net {stages} width {args.conv_width} hidden {args.conv_hidden}", loss, conv_raw)
        for steps in (300, args.table_steps):
            if "tables" in skip:
                break
            torch.manual_seed(0)
            tables = Tables(vocab, mask_id)
            train_tables(tables, train, mask_id, steps)
            report(f"neighbour tables, {steps} steps", evaluate(tables, held, mask_id), conv_raw)
        if "pair" not in skip:
            torch.manual_seed(0)
            pairs = Tables(vocab, mask_id, pairs=((-2, -1), (-1, 1), (1, 2)))
            train_tables(pairs, train, mask_id, args.pair_steps)
            report(f"pair tables, {args.pair_steps} steps", evaluate(pairs, held, mask_id), conv_raw)


if __name__ == "__main__":
    main()
