"""Masked-LM batches: windows of the token stream with a fraction of positions masked.

The scorer masks exactly this way: each position is replaced by the mask id
(the end-of-text token) independently with probability `mask_prob`, and the loss is
the cross-entropy at the masked positions only.
"""

from __future__ import annotations

import numpy as np
import torch


class MaskedBatches:
    def __init__(self, path, seq_len: int, batch_size: int, mask_prob: float, mask_id: int, seed: int) -> None:
        self.data = np.memmap(path, dtype=np.uint16, mode="r")
        self.seq_len, self.batch_size = seq_len, batch_size
        self.mask_prob, self.mask_id = mask_prob, mask_id
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(masked inputs, original tokens, boolean mask), each [batch, seq_len]."""
        ix = self.rng.integers(0, len(self.data) - self.seq_len, size=self.batch_size)
        tokens = np.stack([self.data[i:i + self.seq_len] for i in ix]).astype(np.int64)
        mask = self.rng.random(tokens.shape) < self.mask_prob
        inputs = np.where(mask, self.mask_id, tokens)
        return torch.from_numpy(inputs), torch.from_numpy(tokens), torch.from_numpy(mask)


def masked_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the masked positions."""
    return torch.nn.functional.cross_entropy(logits[mask].float(), targets[mask])
