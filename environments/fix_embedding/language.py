"""The tiny profile's language: a first-order Markov source over 1024 tokens.

The next-token logits after token b are a Zipf-like unigram term plus a random low-rank
(bilinear) term, strength * <f_b, g_c>: every token has its own habits, so a model's embedding
row for a token holds facts that only that token's occurrences (or the models trained here)
can teach. The environment gives the agent about 20 training tokens per vocabulary entry,
while the build trains both models on the source's exact next-token distributions: as with
GPT-2 XL and OpenWebText, relearning the scrambled embedding from the available data cannot
come close to the original, but the small model holds every token's identity.

Why not the kit's shared 128-token corpus (rebench/kit/corpus.py): with 128 tokens a few
hundred steps of plain retraining relearn every row. And this file stays in the environment
folder, which Docker closes to the agent, not in the kit that every sandbox can read: an agent
holding the source could train the large model from it as the build does.

The source is a Markov chain on single tokens, so its entropy rate is exact:
H = sum_b pi(b) H(P(.|b)), pi the stationary distribution (power iteration). Everything is a
pure function of the seed (NumPy's PCG64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LanguageSpec:
    vocab_size: int = 1024
    rank: int = 24
    strength: float = 3.0
    zipf: float = 0.5
    seed: int = 5


def transition_matrix(spec: LanguageSpec) -> np.ndarray:
    """P[b, c] = probability of token c after token b; shape (V, V), float64."""
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    ranks = rng.permutation(spec.vocab_size) + 1
    unigram = -spec.zipf * np.log(ranks)
    f = rng.standard_normal((spec.vocab_size, spec.rank)) / np.sqrt(spec.rank)
    g = rng.standard_normal((spec.vocab_size, spec.rank))
    logits = unigram[None, :] + spec.strength * (f @ g.T)
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    return probs / probs.sum(axis=1, keepdims=True)


def stationary(probs: np.ndarray, iters: int = 5000, tol: float = 1e-14) -> np.ndarray:
    """The chain's stationary distribution, by power iteration from uniform."""
    pi = np.full(probs.shape[0], 1.0 / probs.shape[0])
    for _ in range(iters):
        new = pi @ probs
        if np.abs(new - pi).sum() < tol:
            return new
        pi = new
    return pi


def entropy_rate(spec: LanguageSpec) -> float:
    """Exact entropy rate in nats per token: the least mean loss any model can reach."""
    probs = transition_matrix(spec)
    return float((stationary(probs) * -(probs * np.log(probs)).sum(axis=1)).sum())


def generate(spec: LanguageSpec, n_tokens: int, stream_seed: int, n_streams: int = 512) -> np.ndarray:
    """`n_tokens` tokens as uint16: `n_streams` chains sampled in lockstep, each started from the
    stationary distribution, concatenated (so the joins do not change the statistics)."""
    probs = transition_matrix(spec)
    pi = stationary(probs)
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0
    rng = np.random.Generator(np.random.PCG64([spec.seed, stream_seed]))
    length = -(-n_tokens // n_streams)
    token = rng.choice(spec.vocab_size, size=n_streams, p=pi / pi.sum())
    out = np.empty((n_streams, length), dtype=np.uint16)
    uniforms = rng.random((length, n_streams))
    for t in range(length):
        token = np.minimum((cdf[token] < uniforms[t][:, None]).sum(axis=1), spec.vocab_size - 1)
        out[:, t] = token
    return out.reshape(-1)[:n_tokens].copy()
