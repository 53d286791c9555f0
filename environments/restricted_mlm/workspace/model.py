"""Your masked language model.

The scorer imports this file and calls `get_trained_model()`, which must return a
torch.nn.Module whose forward(token_indices[B, seq_len]) returns logits[B, seq_len, vocab].
The scorer exports the forward pass with torch.export (static input shape) and checks
and runs the exported graph in its own process, so forward must be exportable. Only the
forward pass is restricted (see torch_rule_enforcer.py in your home folder); training
code and get_trained_model() itself are not.

The starting model is a per-token MLP (it ignores context): embedding, two hidden ReLU
layers, output layer; `train.py` trained it into basic_model.pt.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent


class BasicMLP(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.fc1 = nn.Linear(embed_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, vocab_size)

    def forward(self, token_indices: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(self.embedding(token_indices)))
        h = F.relu(self.fc2(h))
        return self.out(h)


def build_model(config: dict) -> BasicMLP:
    return BasicMLP(config["vocab_size"], config["embed_dim"], config["hidden_dim"])


def get_trained_model() -> nn.Module:
    checkpoint = torch.load(HERE / "basic_model.pt", map_location="cpu", weights_only=True)
    config = json.loads((HERE / "basic_model.json").read_text(encoding="utf-8"))
    model = build_model(config)
    model.load_state_dict(checkpoint)
    return model
