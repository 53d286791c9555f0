"""The forbidden-operation enforcer of Restricted Architecture MLM (read-only for the agent).

While a model's forward pass runs inside `restricted()`, every ATen operator PyTorch
dispatches is checked against an allow-list; anything else raises
`DisallowedOperationError`, and the scorer marks the submission invalid. Checking at the
dispatcher (a TorchDispatchMode) catches an operation however it is spelled: `x / 2`,
`torch.div`, `F.softmax`, `nn.LayerNorm`, `F.conv1d` and `scaled_dot_product_attention`
all reach forbidden ATen operators.

Allowed (the task's rules): matrix products (`nn.Linear`, `@`, `matmul`, `einsum`, `bmm`),
embedding lookups, elementwise addition, subtraction and multiplication (by tensors or
constants), `relu`, `sum`, and element selection and reshaping (views, `as_strided`,
`gather`, indexing, `cat`, `stack`, padding with zeros), plus creating constant tensors.
Forbidden: everything else, notably division, exp/log/sqrt/rsqrt/pow, softmax, gelu,
tanh, sigmoid, mean, normalisation layers, convolutions, attention kernels, comparisons,
boolean ops, `where`, trigonometric functions.

Like RE-Bench's enforcer, it cannot see arithmetic done in Python or NumPy inside the
forward pass, or data-dependent Python control flow; those rules are on the honour
system and for manual review.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ENV_FLAG = "IS_TORCH_RESTRICTED"

ALLOWED_OPS = frozenset({
    # matrix products
    "mm", "addmm", "bmm", "baddbmm", "matmul", "dot", "mv", "addmv", "linear", "einsum", "_unsafe_view",
    # embedding and selection
    "embedding", "gather", "index", "index_select", "select", "slice", "narrow", "take", "take_along_dim",
    # elementwise add / subtract / multiply, relu, sum
    "add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "neg", "relu", "relu_", "sum",
    # reshaping and views
    "view", "reshape", "_reshape_alias", "as_strided", "unsqueeze", "squeeze", "permute", "transpose", "t",
    "expand", "contiguous", "clone", "unfold", "flatten", "unflatten", "split", "split_with_sizes", "chunk",
    "unbind", "cat", "stack", "alias", "detach", "lift_fresh", "_to_copy", "copy_", "repeat",
    "constant_pad_nd", "pad", "roll", "flip", "movedim", "squeeze_", "unsqueeze_",
    # constants
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "empty", "empty_like", "new_zeros",
    "new_ones", "new_full", "new_empty", "arange", "scalar_tensor", "fill_", "zero_", "empty_strided",
    "_local_scalar_dense",
})


class DisallowedOperationError(RuntimeError):
    """A forbidden operation ran during a restricted forward pass."""


def op_name(func) -> str:
    """`aten.add.Tensor` -> `add`."""
    return func._schema.name.split("::")[-1]


class RestrictedMode(TorchDispatchMode):
    """Raises on any ATen operator outside ALLOWED_OPS; records what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.violation: str | None = None

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: PyTorch's opt-out for modes that never run under torch.compile. Otherwise it wraps
        `__torch_dispatch__` in torch._dynamo.disable, whose first call imports torch._dynamo: about
        2.4 s of every restricted_mlm score call on a 2-core machine, for a forward pass run eagerly."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_name(func)
        self.seen.add(name)
        if name not in ALLOWED_OPS:
            self.violation = self.violation or name
            raise DisallowedOperationError(f"operation {name!r} ({func}) is not allowed in the forward pass")
        return func(*args, **(kwargs or {}))


@contextmanager
def restricted():
    """Run the body with the rules enforced (and IS_TORCH_RESTRICTED set, as in RE-Bench).

    Yields the mode; after the body, `mode.violation` names the first forbidden op or is None
    (also when the forward pass caught the error itself). A forward pass that removes the
    mode from PyTorch's stack is itself a violation."""
    mode = RestrictedMode()
    previous = os.environ.get(ENV_FLAG)
    os.environ[ENV_FLAG] = "1"
    try:
        with mode:
            yield mode
            if torch._C._len_torch_dispatch_stack() < 1:
                mode.violation = mode.violation or "dispatch mode removed during forward"
                raise DisallowedOperationError("the enforcer was removed from the dispatch stack")
    finally:
        if previous is None:
            os.environ.pop(ENV_FLAG, None)
        else:
            os.environ[ENV_FLAG] = previous
