"""Reference masked LM for Restricted Architecture MLM: a residual 1-D convolutional net.

Only allowed operations in forward: an embedding lookup, a convolution written as an
`as_strided` window view of the zero-padded sequence contracted with `einsum`, ReLU,
additions, multiplication by constants, and linear layers. No normalisation (it would
need division or square roots), so residual branches are scaled down by a constant.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent


def conv1d_same(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x [B, T, C], weight [K, C, O] -> [B, T, O], a centred convolution with zero padding."""
    k = weight.shape[0]
    padded = F.pad(x, (0, 0, k // 2, k // 2)).contiguous()
    b, tp, c = padded.shape
    t = tp - 2 * (k // 2)
    windows = padded.as_strided((b, t, k, c), (tp * c, c, c, 1))
    return torch.einsum("btkc,kco->bto", windows, weight) + bias


class ConvBlock(nn.Module):
    def __init__(self, width: int, kernel: int, hidden: int, residual_scale: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(kernel, width, hidden) / (kernel * width) ** 0.5)
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.proj = nn.Linear(hidden, width)
        self.residual_scale = residual_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(F.relu(conv1d_same(x, self.weight, self.bias))) * self.residual_scale


class ConvMLM(nn.Module):
    def __init__(self, vocab_size: int, width: int, layers: int, kernel: int, hidden: int,
                 residual_scale: float = 0.5) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, width)
        self.blocks = nn.ModuleList(ConvBlock(width, kernel, hidden, residual_scale) for _ in range(layers))
        self.head = nn.Linear(width, vocab_size)

    def forward(self, token_indices: torch.Tensor) -> torch.Tensor:
        h = self.embedding(token_indices)
        for block in self.blocks:
            h = block(h)
        return self.head(F.relu(h))


def build_model(config: dict) -> ConvMLM:
    return ConvMLM(config["vocab_size"], config["width"], config["layers"], config["kernel"], config["hidden"],
                   config.get("residual_scale", 0.5))


def get_trained_model() -> nn.Module:
    config = json.loads((HERE / "conv_model.json").read_text(encoding="utf-8"))
    model = build_model(config)
    model.load_state_dict(torch.load(HERE / "conv_model.pt", map_location="cpu", weights_only=True))
    return model
