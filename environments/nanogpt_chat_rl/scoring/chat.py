"""Tokenizer, sampling and the answer loss of the chat student, shared by the scorer and the agent.

The scorer imports this file from its own read-only folder; the build copies it into the
workspace (chat.py), so the agent samples exactly as the scorer does.

A text is `<bos> prompt <sep> answer <eos>`. On `tiny` tokens are the words of the generated
instruction language (vocab.json in the home folder); on `paper` GPT-2's BPE (tiktoken), with
the prompt in Alpaca's format and `<|endoftext|>` ending the answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

BOS, SEP, EOS, UNK, PAD = "<bos>", "<sep>", "<eos>", "<unk>", "<pad>"
SPECIALS = (PAD, UNK, BOS, SEP, EOS)
MAX_NEW_TOKENS = 60
DEFAULT_GENERATION: dict[str, Any] = {"temperature": 1.0, "top_k": None, "max_new_tokens": MAX_NEW_TOKENS}


class WordTokenizer:
    """Whitespace-separated words of a fixed vocabulary; anything else is <unk>."""

    def __init__(self, vocab: Sequence[str]) -> None:
        self.vocab = list(vocab)
        self.index = {word: i for i, word in enumerate(self.vocab)}
        self.bos, self.sep, self.eos = self.index[BOS], self.index[SEP], self.index[EOS]

    def encode(self, text: str) -> list[int]:
        return [self.index.get(word, self.index[UNK]) for word in text.lower().split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.vocab[i] for i in ids if i >= len(SPECIALS))

    def prompt_ids(self, prompt: str) -> list[int]:
        return [self.bos, *self.encode(prompt), self.sep]


class BPETokenizer:
    """GPT-2's BPE (paper profile): Alpaca's prompt format, <|endoftext|> ends the answer. Its
    files come from `cache` (the build's home/tiktoken_cache), never from the network."""

    def __init__(self, cache: Path | None = None) -> None:
        import os

        if cache is not None and cache.is_dir():
            os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
        import tiktoken

        self.enc = tiktoken.get_encoding("gpt2")
        self.eos = self.enc.eot_token

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.enc.decode([i for i in ids if i != self.eos]).strip()

    def prompt_ids(self, prompt: str) -> list[int]:
        header = ("Below is an instruction that describes a task. Write a response that appropriately "
                  f"completes the request.\n\n### Instruction:\n{prompt}\n\n### Response:\n")
        return self.encode(header)


def load_tokenizer(home: Path) -> WordTokenizer | BPETokenizer:
    """The profile's tokenizer: home/vocab.json (tiny, ci) or GPT-2's BPE (paper)."""
    vocab = home / "vocab.json"
    if vocab.is_file():
        return WordTokenizer(json.loads(vocab.read_text(encoding="utf-8")))
    return BPETokenizer(home / "tiktoken_cache")


@torch.no_grad()
def sample(model: torch.nn.Module, tokenizer: WordTokenizer | BPETokenizer, prompts: Sequence[str], *,
           max_new_tokens: int = MAX_NEW_TOKENS, temperature: float = 1.0, top_k: int | None = None,
           seed: int = 0, batch_size: int = 64) -> list[str]:
    """One answer per prompt, at most `max_new_tokens` tokens, up to <eos>.

    Prompts are grouped by token length (no padding is needed) and sampled in the prompts' order
    from one generator seeded with `seed`, so the answers depend only on the model, the prompts
    and these arguments. temperature 0 is greedy decoding."""
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    block = int(model.config.block_size)  # type: ignore[union-attr]
    encoded = [tokenizer.prompt_ids(p)[-(block - 1):] for p in prompts]
    groups: dict[int, list[int]] = {}
    for index, ids in enumerate(encoded):
        groups.setdefault(len(ids), []).append(index)
    answers = [""] * len(prompts)
    for length in sorted(groups):
        members = groups[length]
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            x = torch.tensor([encoded[i] for i in chunk], dtype=torch.long, device=device)
            steps = max(0, min(max_new_tokens, block - length))
            out = torch.zeros((len(chunk), 0), dtype=torch.long, device=device)
            done = torch.zeros(len(chunk), dtype=torch.bool, device=device)
            for _ in range(steps):
                logits, _ = model(x[:, -block:])
                logits = logits[:, -1, :].float()
                if temperature <= 0:
                    token = logits.argmax(-1)
                else:
                    logits = logits / temperature
                    if top_k is not None and top_k < logits.size(-1):
                        kth = torch.topk(logits, top_k).values[:, -1:]
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                    token = torch.multinomial(F.softmax(logits, -1), 1, generator=generator).squeeze(1)
                token = torch.where(done, torch.full_like(token, tokenizer.eos), token)
                out = torch.cat([out, token[:, None]], 1)
                x = torch.cat([x, token[:, None]], 1)
                done |= token == tokenizer.eos
                if bool(done.all()):
                    break
            for row, index in enumerate(chunk):
                ids = out[row].tolist()
                if tokenizer.eos in ids:
                    ids = ids[:ids.index(tokenizer.eos)]
                answers[index] = tokenizer.decode(ids)
    return answers


def answer_batch(tokenizer: WordTokenizer | BPETokenizer, pairs: Sequence[tuple[str, str]],
                 block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) for next-token training on the answers only: prompt positions and
    padding have target -1 (ignored by the loss)."""
    rows = []
    for prompt, answer in pairs:
        prompt_ids = tokenizer.prompt_ids(prompt)
        ids = (prompt_ids + tokenizer.encode(answer) + [tokenizer.eos])[:block_size + 1]
        targets = [-1] * (len(prompt_ids) - 1) + ids[len(prompt_ids):]
        rows.append((ids[:-1], targets[:len(ids) - 1]))
    width = max(len(ids) for ids, _ in rows)
    x = torch.zeros((len(rows), width), dtype=torch.long)
    y = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, (ids, targets) in enumerate(rows):
        x[i, :len(ids)] = torch.tensor(ids)
        y[i, :len(targets)] = torch.tensor(targets)
    return x, y


def answer_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens (targets -1 ignored)."""
    logits, _ = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1), ignore_index=-1)


def save_checkpoint(model: torch.nn.Module, path: Path, generation: dict[str, Any] | None = None) -> None:
    """The submission format: {"config", "model_state_dict"[, "generation"]} (tensors and plain data
    only, so `torch.load(..., weights_only=True)` reads it). `generation` may set the scorer's
    `temperature` (0-2), `top_k` (a whole number or None) and `max_new_tokens` (1-60)."""
    config = model.config.to_dict()  # type: ignore[union-attr,operator]
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    payload: dict[str, Any] = {"config": config, "model_state_dict": state}
    if generation is not None:
        payload["generation"] = dict(generation)
    torch.save(payload, path)
