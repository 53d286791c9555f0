"""Starting solution: correct, written the obvious way with PyTorch's cumsum."""

import torch


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    is_positive = (x > 0).to(x.dtype)
    positives_before = torch.cumsum(is_positive, dim=0) - is_positive
    odd = positives_before % 2
    return torch.cumsum(x * odd, dim=0).to(x.dtype)
