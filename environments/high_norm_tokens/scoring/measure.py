"""The ground truth of High-Norm Tokens: where the first token's norm explodes and decays, and
along which direction, measured by running the full model on held-out text.

Trusted code: the scorer runs it on the model in /protected (score.py), and build.py runs it to
check that the model it built has the defect. Nothing here runs the agent's code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rebench.kit.gpt import GPT


@dataclass(frozen=True)
class Defect:
    """One model's measured first-token defect. Layers count blocks from 1 (layer l is the
    residual stream after block l; layer 0 is the embedding). `ratios[l]` is the median norm of
    the first token's hidden state over the median norm of the other tokens' at layer l."""

    explode_layer: int | None
    decay_layer: int | None
    direction: list[float] | None
    ratios: list[float]


def windows(tokens: np.ndarray, count: int, length: int, seed: int) -> torch.Tensor:
    """`count` fixed random windows of `length` tokens (the same every call)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    starts = rng.integers(0, len(tokens) - length, size=count)
    return torch.from_numpy(np.stack([tokens[s:s + length] for s in starts]).astype(np.int64))


@torch.no_grad()
def hidden_states(model: GPT, idx: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream after the embedding and after each block: n_layer + 1 tensors (B, T, C)."""
    t = idx.size(1)
    x = model.transformer.wte(idx) + model.transformer.wpe(torch.arange(t))
    states = [x]
    for block in model.transformer.h:
        x = block(x)
        states.append(x)
    return states


def measure(model: GPT, idx: torch.Tensor, threshold: float) -> Defect:
    """The first layer whose first-token ratio reaches `threshold` (explosion), the first layer
    after it whose ratio falls below it again (decay), and the high-norm direction: the mean of
    the first token's unit hidden states at the explosion layer, normalized."""
    states = hidden_states(model.eval(), idx)
    ratios = []
    for h in states:
        norms = h.norm(dim=-1)
        ratios.append(float(norms[:, 0].median() / norms[:, 1:].median()))
    explode = next((layer for layer, r in enumerate(ratios) if layer > 0 and r >= threshold), None)
    if explode is None:
        return Defect(None, None, None, ratios)
    decay = next((layer for layer in range(explode + 1, len(ratios)) if ratios[layer] < threshold), None)
    first = states[explode][:, 0]
    mean = (first / first.norm(dim=-1, keepdim=True)).mean(0)
    return Defect(explode, decay, (mean / mean.norm()).tolist(), ratios)
