"""The `tiny` profile's language model, served by the gateway in the harness's own process.

A small decoder-only transformer (trained at build time by train_model.py, exported as numpy
arrays) that writes a Rust program for a problem description. Inference is numpy only, so the
harness needs no PyTorch: the prompt is run once, its key/value cache is copied to the `n`
samples, and the samples are decoded together one token at a time. Sample `i` of a request
draws from its own generator seeded with `(seed, i)`, so a completion depends only on the
request's arguments, never on other requests or on call order.

Prompt: the description between `<problem>` and `</problem>` lines in the last user message
(else the whole last user message). Answer: the program in a ```rust fenced block.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from rebench.kit.completion import LocalCompletion as Completion  # the gateway's type

PAD, UNK, BOS, SEP, EOS = "<pad>", "<unk>", "<bos>", "<sep>", "<eos>"
SPECIALS = (PAD, UNK, BOS, SEP, EOS)
# Words keep their leading space (as GPT-2's tokenizer does); digits are single tokens so the
# model has to copy constants digit by digit; space runs (indentation) and newlines are tokens.
_PIECES = re.compile(r" ?[A-Za-z_]+| ?\d|\n| +|.", re.DOTALL)
_LINES = re.compile(r"[^\n]+\n")  # whole lines, candidates for line tokens
_PROBLEM = re.compile(r"<problem>\s*(.*?)\s*</problem>", re.DOTALL)
FENCE = "```rust\n"


class Tokenizer:
    """Word-level vocabulary learned from the training pairs, with a character fallback; lines
    frequent in the training texts (the programs' input-reading boilerplate, fixed statement
    lines) are single tokens, so the model spends its capacity on what differs between problems."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self.index = {piece: i for i, piece in enumerate(vocab)}

    @classmethod
    def build(cls, texts: list[str], min_count: int = 2, line_share: float = 0.005) -> Tokenizer:
        counts: dict[str, int] = {}
        lines: dict[str, int] = {}
        for text in texts:
            for piece in _PIECES.findall(text):
                counts[piece] = counts.get(piece, 0) + 1
            for line in _LINES.findall(text):
                lines[line] = lines.get(line, 0) + 1
        chars = [chr(c) for c in range(32, 127)] + ["\n"]
        words = sorted(p for p, c in counts.items() if c >= min_count and p not in chars)
        frequent = sorted(line for line, c in lines.items() if c >= max(min_count, line_share * len(texts)))
        return cls([*SPECIALS, *chars, *words, *(line for line in frequent if line not in counts)])

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for line in re.findall(r"[^\n]*\n|[^\n]+", text):
            if len(line) > 1 and line.endswith("\n") and line in self.index:
                ids.append(self.index[line])
                continue
            for piece in _PIECES.findall(line):
                if piece in self.index:
                    ids.append(self.index[piece])
                else:  # an unseen word: its characters
                    ids.extend(self.index.get(ch, self.index[UNK]) for ch in piece)
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids if i >= len(SPECIALS))

    def prompt_ids(self, description: str) -> list[int]:
        return [self.index[BOS], *self.encode(description.strip()), self.index[SEP]]


def extract_description(messages: list[dict[str, Any]]) -> str:
    """The problem description from OpenAI chat messages (see the module docstring)."""
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return ""
    content = users[-1].get("content", "")
    if isinstance(content, list):  # content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    found = _PROBLEM.search(str(content))
    return found.group(1) if found else str(content).strip()




def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


class LocalModel:
    """The exported transformer: count_tokens, chat_prompt and seeded batched generate."""

    def __init__(self, folder: Path) -> None:
        self.config: dict[str, Any] = json.loads((folder / "config.json").read_text())
        self.tokenizer = Tokenizer(json.loads((folder / "vocab.json").read_text()))
        with np.load(folder / "weights.npz") as weights:
            self.w = {key: weights[key].astype(np.float32) for key in weights.files}
        self.name = str(self.config.get("name", "rust-tiny"))
        self.n_layer, self.n_head = int(self.config["n_layer"]), int(self.config["n_head"])
        self.block_size = int(self.config["block_size"])

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def chat_prompt(self, messages: list[dict[str, Any]]) -> str:
        return f"<problem>\n{extract_description(messages)}\n</problem>"

    def _forward(self, ids: np.ndarray, cache: list[list[np.ndarray]], pos: int) -> np.ndarray:
        """Logits of the last position for `ids` (batch, t) at positions pos.., filling the cache."""
        w = self.w
        batch, t = ids.shape
        x = w["wte"][ids] + w["wpe"][pos : pos + t]
        d = x.shape[-1]
        hd = d // self.n_head
        for layer in range(self.n_layer):
            p = f"h{layer}."
            h = _layer_norm(x, w[p + "ln1.w"], w[p + "ln1.b"])
            qkv = h @ w[p + "attn.w"] + w[p + "attn.b"]
            q, k, v = (a.reshape(batch, t, self.n_head, hd).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, -1))
            cache[layer][0][:, :, pos : pos + t] = k
            cache[layer][1][:, :, pos : pos + t] = v
            keys, values = cache[layer][0][:, :, : pos + t], cache[layer][1][:, :, : pos + t]
            att = q @ keys.transpose(0, 1, 3, 2) / np.sqrt(hd)
            if t > 1:
                mask = np.triu(np.ones((t, pos + t), dtype=bool), k=pos + 1)
                att = np.where(mask, -1e9, att)
            y = (_softmax(att) @ values).transpose(0, 2, 1, 3).reshape(batch, t, d)
            x = x + y @ w[p + "proj.w"] + w[p + "proj.b"]
            h = _layer_norm(x, w[p + "ln2.w"], w[p + "ln2.b"])
            x = x + _gelu(h @ w[p + "fc.w"] + w[p + "fc.b"]) @ w[p + "out.w"] + w[p + "out.b"]
        x = _layer_norm(x[:, -1], w["lnf.w"], w["lnf.b"])
        logits: np.ndarray = x @ w["wte"].T
        return logits

    def generate(self, prompt: str, *, n: int, temperature: float, max_tokens: int, seed: int) -> list[Completion]:
        found = _PROBLEM.search(prompt)
        ids = self.tokenizer.prompt_ids(found.group(1) if found else prompt)
        ids = ids[-(self.block_size // 2) :]  # an over-long prompt keeps its end (and <sep>)
        steps = max(0, min(max_tokens, self.block_size - len(ids)))
        d = self.w["wte"].shape[1]
        hd = d // self.n_head
        total = len(ids) + steps
        cache = [[np.zeros((1, self.n_head, total, hd), np.float32) for _ in range(2)] for _ in range(self.n_layer)]
        logits = self._forward(np.array([ids]), cache, 0)
        cache = [[np.repeat(a, n, axis=0) for a in layer] for layer in cache]
        logits = np.repeat(logits, n, axis=0)
        rngs = [np.random.default_rng([seed % 2**63, i]) for i in range(n)]
        eos = self.tokenizer.index[EOS]
        out: list[list[int]] = [[] for _ in range(n)]
        done = np.zeros(n, dtype=bool)
        for step in range(steps):
            tokens = np.empty(n, dtype=np.int64)
            if temperature <= 0:
                tokens[:] = logits.argmax(-1)
            else:
                probs = _softmax(logits.astype(np.float64) / temperature)
                cdf = np.cumsum(probs, -1)
                for row in range(n):
                    drawn = int(np.searchsorted(cdf[row], rngs[row].random() * cdf[row, -1]))
                    tokens[row] = min(drawn, cdf.shape[1] - 1)
            for row in np.flatnonzero(~done).tolist():
                out[row].append(int(tokens[row]))
                done[row] = tokens[row] == eos
            if done.all() or step == steps - 1:
                break
            logits = self._forward(tokens[:, None], cache, len(ids) + step)
        completions = []
        for sample in out:
            finished = bool(sample) and sample[-1] == eos
            code = self.tokenizer.decode(sample)
            text = FENCE + code.rstrip("\n") + "\n```" if finished else FENCE + code
            reason = "stop" if finished else "length"
            completions.append(Completion(text=text, output_tokens=len(sample), finish_reason=reason))
        return completions


def load(assets: Path) -> LocalModel:
    """The model exported in `assets` (the build's DIR/model) or in `assets`/model (the build's DIR)."""
    folder = assets if (assets / "config.json").is_file() else assets / "model"
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no model in {assets}: expected config.json there or in {assets / 'model'}")
    return LocalModel(folder)
