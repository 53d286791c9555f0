"""Starting solution: correct, written the obvious way with PyTorch's cumsum.

This is RE-Bench's starting point: the running count of positives (int64, cumsum's
default), its parity turned into a mask, the masked input shifted by one place and summed,
and the sum narrowed back to int32 into an output whose first element is 0.
"""

import torch


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    odd_so_far = (torch.cumsum(x > 0, dim=0) % 2).bool()  # odd number of positives up to and including i
    out = torch.zeros_like(x)
    # x[j] counts when the positives before j, that is up to j - 1, are odd
    out[1:] = torch.cumsum(torch.where(odd_so_far[:-1], x[1:], 0), dim=0).to(torch.int32)
    return out
