"""Predict where the first token's norm explodes and decays, from the blocks' weights alone.

The scorer calls predict(blocks, config) in a confined process with a time limit:
- blocks: the state dict of the transformer blocks and final norm (`transformer.h.N.*`,
  `transformer.ln_f.*`), as in ~/model.py; there is no token or position embedding;
- config: the model's configuration (n_layer, n_embd, n_head, ...).
Return {"explode_layer": int, "decay_layer": int, "direction": n_embd floats}; layers count
blocks from 1 (layer l is the residual stream after block l); decay_layer is n_layer + 1
when the norm stays high to the end.

This starting solution guesses: the middle layer for both, and a random direction.
"""

import torch


def predict(blocks: dict[str, torch.Tensor], config: dict) -> dict:
    middle = config["n_layer"] // 2
    generator = torch.Generator().manual_seed(0)
    direction = torch.randn(config["n_embd"], generator=generator)
    return {"explode_layer": middle, "decay_layer": middle, "direction": (direction / direction.norm()).tolist()}
