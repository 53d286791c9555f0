"""Finetuning data: JSONL prompt/response rows, tokenized into shards of fixed-length samples.

A sample is BOS + prompt + response + EOS, truncated to max_seq_len; only the response and EOS
are trained on (labels of the prompt are -100), as in LLM Foundry's finetuning. A split folder
holds `index.json` and `shard.NNNNN.npz` files (input ids, prompt lengths and lengths)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import numpy as np
import torch

IGNORE = -100
_tokenizer: Any = None


def _load_tokenizer(name: str) -> None:
    global _tokenizer
    from transformers import AutoTokenizer

    _tokenizer = AutoTokenizer.from_pretrained(name)


def _tokenize(args: tuple[list[dict[str, str]], int]) -> list[tuple[list[int], int]]:
    rows, max_seq_len = args
    out = []
    for row in rows:
        prompt = _tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
        response = _tokenizer(row["response"], add_special_tokens=False)["input_ids"]
        ids = [_tokenizer.bos_token_id, *prompt, *response, _tokenizer.eos_token_id][:max_seq_len]
        out.append((ids, min(1 + len(prompt), len(ids))))
    return out


def read_rows(path: str | Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def tokenize_rows(rows: list[dict[str, str]], tokenizer: str, max_seq_len: int,
                  num_workers: int = 0) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) per row; with workers, in a pool of fresh processes."""
    if num_workers <= 0:
        _load_tokenizer(tokenizer)
        return _tokenize((rows, max_seq_len))
    chunks = [(rows[i::num_workers], max_seq_len) for i in range(num_workers)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(num_workers, initializer=_load_tokenizer, initargs=(tokenizer,)) as pool:
        parts = pool.map(_tokenize, chunks)
    merged: list[tuple[list[int], int]] = [([], 0)] * len(rows)
    for index, part in enumerate(parts):
        merged[index::num_workers] = part
    return merged


def write_split(samples: list[tuple[list[int], int]], folder: str | Path, max_seq_len: int,
                shard_size: int = 256) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shards = []
    for number, start in enumerate(range(0, len(samples), shard_size)):
        chunk = samples[start:start + shard_size]
        ids = np.zeros((len(chunk), max_seq_len), dtype=np.int32)
        lengths = np.array([len(s[0]) for s in chunk], dtype=np.int32)
        for i, (tokens, _) in enumerate(chunk):
            ids[i, :len(tokens)] = tokens
        name = f"shard.{number:05d}.npz"
        np.savez(folder / name, input_ids=ids, prompt_len=np.array([s[1] for s in chunk], dtype=np.int32),
                 length=lengths)
        shards.append({"file": name, "samples": len(chunk)})
    (folder / "index.json").write_text(json.dumps({"max_seq_len": max_seq_len, "shards": shards}, indent=1))


class ShardDataset(torch.utils.data.Dataset):
    """A tokenized split, read shard by shard."""

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        index = json.loads((folder / "index.json").read_text())
        parts = [np.load(folder / shard["file"]) for shard in index["shards"]]
        self.input_ids = np.concatenate([p["input_ids"] for p in parts])
        self.prompt_len = np.concatenate([p["prompt_len"] for p in parts])
        self.length = np.concatenate([p["length"] for p in parts])

    def __len__(self) -> int:
        return len(self.length)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.from_numpy(self.input_ids[index].astype(np.int64))
        n, p = int(self.length[index]), int(self.prompt_len[index])
        labels = ids.clone()
        labels[:p] = IGNORE
        labels[n:] = IGNORE
        mask = torch.zeros_like(ids)
        mask[:n] = 1
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}
