"""How a sparsity plan is applied to the GPT: the one definition the scorer uses (the agent's home
holds a byte-identical copy, `sparse_gpt.py`, for developing and checking a plan).

A plan maps each sparsified linear layer ("site", see `sites`) to tensors:

- "transform" T, a d x d invertible matrix (d = the layer's input width): the layer's input x
  becomes z = (x - shift) @ T, and the layer's weight is rewritten so that, without sparsity,
  its output is unchanged: W' = W @ inverse(T).T, bias' = bias + W @ shift.
- "shift" (optional, width d): subtracted before the transform (zeros when absent).
- exactly one selection rule, applied to every token's z:
  "keep" (a one-element integer tensor k): the k entries of largest magnitude stay, the rest
  become zero (top-k); or
  "threshold" (width d): entries with |z_i| < threshold_i become zero.

The zeros of z are the zeros entering the linear layer (its input is z, its weight W'): those
are what the scorer counts, per site, on held-out text. An identity transform with "keep" is
per-token magnitude top-k (TEAL-like); an orthogonal transform from the principal axes of a
layer's calibration inputs is a layerwise rotation (LaRoSA).
"""

from __future__ import annotations

import torch
from torch import nn

MAX_CONDITION = 1e4
"""The largest condition number a transform may have (an ill-conditioned one would turn a
rounding error of z into a large error of the output)."""

LAYERS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
"""The linear layers of each block whose inputs are sparsified (the paper's q/k/v, o, up and
down projections; the GPT's attention has one fused q/k/v layer)."""


def sites(n_layer: int) -> list[str]:
    """The names of all sparsified layers: "h.{block}.{layer}"."""
    return [f"h.{i}.{name}" for i in range(n_layer) for name in LAYERS]


def module_at(model: nn.Module, site: str) -> nn.Linear:
    module = model.transformer.get_submodule(site)
    if not isinstance(module, nn.Linear):
        raise TypeError(f"{site} is not a linear layer")
    return module


class SparseLinear(nn.Module):
    """A linear layer whose input is shifted, transformed and sparsified; counts the zeros."""

    def __init__(self, linear: nn.Linear, entry: dict[str, torch.Tensor]) -> None:
        super().__init__()
        d = linear.in_features
        weight = linear.weight.detach().double()
        bias = linear.bias.detach().double() if linear.bias is not None else torch.zeros(linear.out_features,
                                                                                       dtype=torch.float64)
        transform = entry["transform"].double()
        shift = entry.get("shift", torch.zeros(d)).double()
        self.register_buffer("transform", transform.float())
        self.register_buffer("shift", shift.float())
        self.register_buffer("weight", (weight @ torch.linalg.inv(transform).T).float())
        self.register_buffer("bias", (bias + weight @ shift).float())
        self.keep = int(entry["keep"].reshape(-1)[0]) if "keep" in entry else None
        self.register_buffer("threshold", entry["threshold"].float() if "threshold" in entry else None)
        self.zeros = 0
        self.count = 0

    def sparsify(self, z: torch.Tensor) -> torch.Tensor:
        if self.keep is not None:
            keep = max(0, min(self.keep, z.shape[-1]))
            mask = torch.zeros_like(z, dtype=torch.bool)
            if keep:
                mask.scatter_(-1, z.abs().topk(keep, dim=-1).indices, True)
            return torch.where(mask, z, torch.zeros_like(z))
        assert self.threshold is not None
        return torch.where(z.abs() >= self.threshold, z, torch.zeros_like(z))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.sparsify((x - self.shift) @ self.transform)
        self.zeros += int((z == 0).sum())
        self.count += z.numel()
        return z @ self.weight.T + self.bias


def check_entry(site: str, entry: dict[str, torch.Tensor], d: int) -> None:
    """Raises ValueError naming what is wrong with one site's entry."""
    allowed = {"transform", "shift", "keep", "threshold"}
    if not isinstance(entry, dict) or set(entry) - allowed or "transform" not in entry:
        raise ValueError(f"{site}: an entry is a dict with 'transform', optional 'shift', and 'keep' or 'threshold'")
    if ("keep" in entry) == ("threshold" in entry):
        raise ValueError(f"{site}: give exactly one of 'keep' and 'threshold'")
    shapes = {"transform": (d, d), "shift": (d,), "threshold": (d,), "keep": (1,)}
    for key, value in entry.items():
        if not isinstance(value, torch.Tensor) or tuple(value.reshape(-1).shape if key == "keep" else value.shape) \
                != shapes[key]:
            raise ValueError(f"{site}: {key} must be a tensor of shape {shapes[key]}")
        if not torch.isfinite(value.double()).all():
            raise ValueError(f"{site}: {key} has non-finite values")
    condition = float(torch.linalg.cond(entry["transform"].double()))
    if not condition < MAX_CONDITION:
        raise ValueError(f"{site}: the transform's condition number {condition:.3g} is not below {MAX_CONDITION:g}")


def apply_plan(model: nn.Module, plan: dict[str, dict[str, torch.Tensor]], n_layer: int) -> dict[str, SparseLinear]:
    """Replace every site's linear layer by its SparseLinear (in place); every site must be planned."""
    expected = sites(n_layer)
    if set(plan) != set(expected):
        missing, extra = sorted(set(expected) - set(plan)), sorted(set(plan) - set(expected))
        raise ValueError(f"the plan must cover exactly the sites {expected[:2]}...: missing {missing[:3]}, "
                         f"unexpected {extra[:3]}")
    layers = {}
    for site in expected:
        linear = module_at(model, site)
        check_entry(site, plan[site], linear.in_features)
        layers[site] = SparseLinear(linear, plan[site])
        parent, _, name = site.rpartition(".")
        setattr(model.transformer.get_submodule(parent), name, layers[site])
    return layers


@torch.no_grad()
def collect_inputs(model: nn.Module, tokens: torch.Tensor, n_layer: int,
                   batch_size: int = 16) -> dict[str, torch.Tensor]:
    """The dense inputs of every site for `tokens` (sequences x positions): site -> (N, d)."""
    found: dict[str, list[torch.Tensor]] = {site: [] for site in sites(n_layer)}
    handles = [module_at(model, site).register_forward_pre_hook(
        lambda _m, args, site=site: found[site].append(args[0].reshape(-1, args[0].shape[-1]).clone()))
        for site in found]
    try:
        for start in range(0, len(tokens), batch_size):
            model(tokens[start:start + batch_size])
    finally:
        for handle in handles:
            handle.remove()
    return {site: torch.cat(chunks) for site, chunks in found.items()}
