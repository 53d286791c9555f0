"""Starting solution of the `paper` profile: RE-Bench's, step for step.

A running count of the positives (cumsum, int64), its parity as a boolean mask, passed once
more through `torch.where(mask, True, False)` (a step that changes nothing but costs a pass
over memory; RE-Bench's start has it, and the paper's anchors were measured with it), the
masked input shifted by one place, summed and narrowed to int32 into an output whose first
element is 0. The `tiny` profile starts from `workspace/solution.py`, the same without that
step (its anchors were measured without it).
"""

import torch


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    positives_so_far = (x > 0).cumsum(0)
    odd_so_far = torch.where((positives_so_far % 2).bool(), True, False)
    out = torch.zeros_like(x)
    # x[j] counts when the positives before j, that is up to j - 1, are odd
    out[1:] = torch.where(odd_so_far[:-1], x[1:], 0).cumsum(0).to(torch.int32)
    return out
