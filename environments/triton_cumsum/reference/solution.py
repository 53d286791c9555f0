"""Reference solution: one pass over the data, compiled with Numba.

The starting solution makes about eight passes over memory (comparisons, two cumsums in
int64, a modulo, a select, copies). Here a single loop carries the parity of the positives
seen so far and the running sum: each element is read once and its output written once, and
both carried values stay in registers. The loop is compiled when this file is imported (the
explicit signature asks for it then), before any timed call.

Numba runs on the CPU (the `tiny` profile). On CUDA (`paper`) the same definition runs as a
few in-place int32 PyTorch passes: RE-Bench's own reference there was three Triton kernels
(block-wise parity scan, conditional scan, block-sum fix-up), and the `paper` anchors are the
values METR measured with it, not this stand-in's.
"""

import torch

try:
    import numba
except ImportError:  # the `paper` image installs RE-Bench's packages, which have no Numba
    numba = None


if numba is not None:

    @numba.njit("void(int32[::1], int32[::1])", nogil=True, boundscheck=False, cache=False)
    def _scan(x, out):
        total = 0  # the running sum; stored as int32, so it wraps as an int32 cumsum does
        odd = 0  # 1 while an odd number of positives has been seen
        for i in range(x.size):
            value = x[i]
            total += value & -odd  # value when odd is 1, 0 when it is 0: no branch
            out[i] = total
            odd ^= value > 0


def _few_passes(x: torch.Tensor) -> torch.Tensor:
    """The same definition in place, in int32, for devices Numba does not reach."""
    is_positive = x > 0
    parity = torch.cumsum(is_positive, dim=0, dtype=torch.int32)
    parity.sub_(is_positive.to(torch.int32)).bitwise_and_(1)
    parity.mul_(x)
    return torch.cumsum(parity, dim=0, dtype=torch.int32)


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    if numba is None or x.device.type != "cpu":
        return _few_passes(x)
    out = torch.empty_like(x)
    _scan(x.contiguous().numpy(), out.numpy())
    return out
