"""A synthetic, OpenWebText-shaped token stream for the `tiny` profiles.

Tokens come from a seeded second-order Markov source whose next-token logits are
a sum of a unigram (Zipf-like) term, a term of the previous token and a term of
the token before it. Because the source is a Markov chain on pairs, its entropy
rate can be computed exactly from the stationary distribution; the environments
use it as the irreducible-loss offset, the way 1.5 nats approximates the floor of
OpenWebText under the GPT-2 tokenizer. The stream is written as nanoGPT-style
`uint16` `.bin` files, and a tiny word-level tokenizer gives every id a word so
the data can be read as text.

Everything is a pure function of the seed (NumPy's PCG64), so every machine
builds byte-identical assets.

Part of the environment kit's build-time code (NumPy).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class SourceSpec:
    """The parameters of the synthetic source. `vocab_size` includes the special
    `<|endoftext|>` id (the last id), which the source never emits and the masked-LM
    environment uses as its mask token, as RE-Bench uses GPT-2's 50256."""

    vocab_size: int = 128
    seed: int = 1234
    zipf: float = 1.0
    prev_scale: float = 2.2
    prev2_scale: float = 1.6
    repeat_penalty: float = 3.0

    @property
    def n_emit(self) -> int:
        return self.vocab_size - 1

    @property
    def eot(self) -> int:
        return self.vocab_size - 1

    def logits(self, rng: np.random.Generator) -> np.ndarray:
        """Next-token logits L[a, b, c] for the pair (a, b), drawn from `rng`: additive in a and b."""
        n = self.n_emit
        ranks = rng.permutation(n) + 1
        unigram = -self.zipf * np.log(ranks)
        prev = self.prev_scale * rng.standard_normal((n, n))
        prev2 = self.prev2_scale * rng.standard_normal((n, n))
        prev[np.arange(n), np.arange(n)] -= self.repeat_penalty
        return unigram[None, None, :] + prev2[:, None, :] + prev[None, :, :]


@dataclass(frozen=True)
class InteractionSourceSpec(SourceSpec):
    """A source whose next token depends on the previous two jointly, not through a sum of terms.

    Every emitted token belongs to one of `classes` word classes (seeded). The logits of c after
    (a, b) are the unigram term, small token-level terms of a and b (`prev_scale`, `prev2_scale`),
    small class-level terms of (class a, class c) and (class b, class c) (`class_scale`), and
    `interaction_scale` times a joint term T[class a, class b, class c], double-centred over the
    first two classes so that it has no part that a term of a alone or of b alone could carry.
    A sum of one lookup table per neighbour therefore learns little beyond the class-level terms,
    and a pair table (a * V + b, V**2 rows) sees few examples per row in the tiny training stream,
    while a network that learns the classes (a few dimensions of an embedding) and combines two
    neighbours with a ReLU learns the joint term from every pair at once. Restricted MLM's tiny
    corpus (issue 25, item 11)."""

    vocab_size: int = 256
    prev_scale: float = 0.3
    prev2_scale: float = 0.3
    repeat_penalty: float = 0.0
    classes: int = 8
    class_scale: float = 0.7
    interaction_scale: float = 3.0

    def logits(self, rng: np.random.Generator) -> np.ndarray:
        k = self.classes
        additive = super().logits(rng)
        cls = rng.integers(k, size=self.n_emit)
        first = self.class_scale * rng.standard_normal((k, k))
        second = self.class_scale * rng.standard_normal((k, k))
        joint = rng.standard_normal((k, k, k))
        joint = joint - joint.mean(axis=0, keepdims=True) - joint.mean(axis=1, keepdims=True) \
            + joint.mean(axis=(0, 1), keepdims=True)
        return (additive + first[cls][:, cls][:, None, :] + second[cls][:, cls][None, :, :]
                + self.interaction_scale * joint[cls][:, cls][:, :, cls])


def transition_table(spec: SourceSpec) -> np.ndarray:
    """P[a, b, c] = probability of token c after the pair (a, b); shape (n, n, n), float64."""
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    logits = spec.logits(rng)
    logits -= logits.max(axis=2, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=2, keepdims=True)
    return probs


def stationary_pairs(probs: np.ndarray, iters: int = 2000, tol: float = 1e-13) -> np.ndarray:
    """Stationary distribution pi[a, b] of the pair chain (a, b) -> (b, c), by power iteration."""
    n = probs.shape[0]
    pi = np.full((n, n), 1.0 / (n * n))
    for _ in range(iters):
        new = np.einsum("ab,abc->bc", pi, probs)
        if np.abs(new - pi).sum() < tol:
            return new
        pi = new
    return pi


def entropy_rate(spec: SourceSpec) -> float:
    """Exact entropy rate of the source in nats per token: sum_ab pi(a,b) H(P(.|a,b))."""
    probs = transition_table(spec)
    pi = stationary_pairs(probs)
    cond = -(probs * np.log(probs)).sum(axis=2)
    return float((pi * cond).sum())


def generate(spec: SourceSpec, n_tokens: int, stream_seed: int, n_streams: int = 512) -> np.ndarray:
    """`n_tokens` tokens as uint16: `n_streams` independent chains sampled in lockstep and
    concatenated (each starts from the stationary pair distribution, so the joins do not
    change the statistics)."""
    probs = transition_table(spec)
    pi = stationary_pairs(probs)
    cdf = np.cumsum(probs, axis=2)
    cdf[:, :, -1] = 1.0
    rng = np.random.Generator(np.random.PCG64([spec.seed, stream_seed]))
    length = -(-n_tokens // n_streams)
    n = spec.n_emit
    start = rng.choice(n * n, size=n_streams, p=pi.reshape(-1) / pi.sum())
    a, b = start // n, start % n
    out = np.empty((n_streams, length), dtype=np.uint16)
    uniforms = rng.random((length, n_streams))
    for t in range(length):
        rows = cdf[a, b]
        c = (rows < uniforms[t][:, None]).sum(axis=1)
        c = np.minimum(c, n - 1)
        out[:, t] = c
        a, b = b, c
    return out.reshape(-1)[:n_tokens].copy()


def masked_entropy_bound(spec: SourceSpec, n_samples: int = 20000, sample_seed: int = 7) -> tuple[float, float]:
    """Monte Carlo estimate (mean, standard error) of H(x_t | x_{t-2}, x_{t-1}, x_{t+1}, x_{t+2}),
    the entropy of a token given its whole Markov blanket. No masked-LM can beat it on
    average (it sees at most the blanket, often less), so it is the offset of the tiny
    Restricted MLM score. Each sample's posterior over x_t is exact; only the average is sampled."""
    probs = transition_table(spec)
    tokens = generate(spec, n_samples * 8, stream_seed=sample_seed).astype(np.int64)
    idx = np.arange(2, len(tokens) - 2, 8)[:n_samples]
    a, b = tokens[idx - 2], tokens[idx - 1]
    d, e = tokens[idx + 1], tokens[idx + 2]
    # log P(x | a, b) + log P(d | b, x) + log P(e | x, d), for every candidate x.
    logp = np.log(probs)
    score = logp[a, b, :] + logp[b[:, None], np.arange(spec.n_emit)[None, :], d[:, None]]
    score = score + logp[np.arange(spec.n_emit)[None, :], d[:, None], e[:, None]]
    score -= score.max(axis=1, keepdims=True)
    post = np.exp(score)
    post /= post.sum(axis=1, keepdims=True)
    ent = -(post * np.log(np.clip(post, 1e-300, None))).sum(axis=1)
    return float(ent.mean()), float(ent.std() / np.sqrt(len(ent)))


class WordTokenizer:
    """A word-level tokenizer for the synthetic language: id i <-> a pronounceable word."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}

    @classmethod
    def for_spec(cls, spec: SourceSpec) -> WordTokenizer:
        rng = np.random.Generator(np.random.PCG64([spec.seed, 99]))
        onsets = list("bdfgklmnprstvz")
        vowels = list("aeiou")
        words: list[str] = []
        seen: set[str] = set()
        while len(words) < spec.n_emit:
            syllables = int(rng.integers(1, 4))
            word = "".join(onsets[int(rng.integers(len(onsets)))] + vowels[int(rng.integers(len(vowels)))]
                           for _ in range(syllables))
            if word not in seen:
                seen.add(word)
                words.append(word)
        words.append("<|endoftext|>")
        return cls(words)

    def encode(self, text: str) -> list[int]:
        return [self.index[w] for w in text.split()]

    def decode(self, ids) -> str:
        return " ".join(self.words[int(i)] for i in ids)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"words": self.words}, indent=0) + "\n", encoding="utf-8")


def write_bin(path: Path, tokens: np.ndarray) -> None:
    """nanoGPT's format: a flat little-endian uint16 array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens.astype("<u2").tofile(path)


def write_meta(path: Path, spec: SourceSpec, extra: dict | None = None) -> None:
    meta = {"vocab_size": spec.vocab_size, "eot_token": spec.eot, "source": asdict(spec), **(extra or {})}
    path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    import time

    spec = SourceSpec()
    t0 = time.time()
    print("entropy rate", entropy_rate(spec), f"{time.time() - t0:.2f}s")
    t0 = time.time()
    toks = generate(spec, 1_000_000, stream_seed=1)
    print("generated", len(toks), f"{time.time() - t0:.2f}s", toks[:20])
    t0 = time.time()
    print("blanket entropy", masked_entropy_bound(spec), f"{time.time() - t0:.2f}s")
    counts = np.bincount(toks, minlength=spec.vocab_size) / len(toks)
    print("unigram entropy", float(-(counts[counts > 0] * np.log(counts[counts > 0])).sum()))
    print(WordTokenizer.for_spec(spec).decode(toks[:20]))
