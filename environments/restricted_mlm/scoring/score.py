"""Scoring for Restricted Architecture MLM: masked-prediction loss of `get_trained_model()`.

Called by the rebench scoring helper as `score(ctx)`; run directly (`python score.py`)
it prints a result without logging it (on the visible validation split when the
held-out split is not readable).

The agent's model.py runs only in a separate, confined child (model_worker.py) that cannot
read /protected nor reach this process: it builds the model, exports its forward pass with
torch.export for inputs of the scored shape, and sends the graph back as JSON plus weight
bytes (nothing pickled), then exits. This process, which no agent code runs in, checks
every operator of the graph against torch_rule_enforcer.ALLOWED_OPS (the environment
kit's, in the harness's read-only folder) and runs the graph itself, under torch_rule_enforcer.restricted(), on
`eval_batches` batches of `seq_len` tokens from the held-out split, each position masked
with probability `mask_prob` (replaced by `mask_id`). The loss is the mean cross-entropy
at the masked positions. Raw score = ln(loss - loss_offset), lower is better. A model that
cannot be exported, a forbidden operation in the graph or while it runs, a wrong output
shape or a non-finite loss makes the score invalid (None).

The `split` param names the held-out file: "intermediate" (the default: /protected/heldout.bin,
what every score call uses) or "final" (/protected/final.bin, the held-out final split the harness
scores once after the attempt with params-final.json; tiny only, docs/heldout.md). An unknown
split, or a final split that is missing or not readable, makes the score invalid. The details
give the loss's standard error over the batches and the raw score's (`loss_se`, `raw_se`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rebench.kit import torch_rule_enforcer as enforcer
from rebench.kit.confined import ChildFailed, ConfinedChild
from rebench.kit.context import direct_context
from rebench.kit.torch_scoring import prepare


def export_in_child(ctx: dict[str, Any], solution: Path, device: str, shape: tuple[int, int]) -> tuple[dict, bool]:
    """The agent's model exported by model_worker.py in a confined child (`ctx["confine_command"]`),
    so code in model.py cannot read the held-out data this process holds nor touch this process;
    the child exits before any held-out batch is drawn. Returns (its reply, whether it was confined)."""
    source = (Path(__file__).resolve().parent / "model_worker.py").read_text(encoding="utf-8")
    child = ConfinedChild(ctx, source, [str(solution), device, str(int(ctx.get("threads", 1)))], cwd=str(solution),
                          name="the model process")
    try:
        child.send({"enforcer_source": Path(enforcer.__file__).read_text(encoding="utf-8"),
                    "shape": list(shape)})
        reply = child.receive(max_payload_bytes=None)  # the model's weights
    finally:
        child.close(grace_s=30.0)
    if "error" in reply:
        raise ChildFailed(str(reply["error"]))
    return reply, child.confined


_DTYPES = {name: getattr(torch, name) for name in (
    "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")}
_LAYOUTS = {"strided": torch.strided}
_MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format, "preserve_format": torch.preserve_format}
# Allowed operators that return uninitialized memory: in this process it could hold freed copies
# of held-out tokens, so the scorer fills their results with zeros.
_UNINITIALIZED_OPS = frozenset({"empty", "empty_like", "new_empty", "empty_strided"})
# Assertions torch.export inserts; they compute nothing, so they are checked by name and skipped.
_SKIPPED_OPS = frozenset({"_assert_tensor_metadata"})


def _zero_filled(op: Any) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs).zero_()

    return call


class BadGraph(Exception):
    """The model's exported graph is malformed or uses something outside the allow-list."""


class ScoredGraph:
    """The model's forward pass as the child exported it, decoded here from JSON and bytes only
    and run by this trusted process: every call must be an ATen operator on the allow-list
    (`forbidden` names the others), and `forward` runs it under the trusted enforcer too, so an
    allowed composite operator that dispatches to a forbidden one is caught as well."""

    def __init__(self, reply: dict[str, Any], device: str, allowed: frozenset[str]) -> None:
        self.device = torch.device(device)
        self.allowed = allowed
        self.forbidden: list[str] = []
        self.ops: set[str] = set()
        try:
            self.tensors = self._tensors(reply["tensors"], reply["payload"])
            self.nodes = [self._node(i, node) for i, node in enumerate(reply["graph"])]
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError, RecursionError) as exc:
            raise BadGraph(f"the exported graph is malformed: {type(exc).__name__}: {exc}"[:600]) from exc
        if not self.nodes or self.nodes[-1][0] != "output" or [n[0] for n in self.nodes].count("output") != 1:
            raise BadGraph("the exported graph must end in one output")
        if [n[0] for n in self.nodes].count("input") != 1:
            raise BadGraph("the exported graph must take exactly one input (the token ids)")

    def _tensors(self, specs: list[dict[str, Any]], payload: bytes) -> list[torch.Tensor]:
        tensors, offset = [], 0
        for spec in specs:
            dtype = _DTYPES[spec["dtype"]]
            shape = [int(size) for size in spec["shape"]]
            if any(size < 0 for size in shape):
                raise ValueError(f"tensor shape {shape} has a negative size")
            nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            if int(spec["nbytes"]) != nbytes or offset + nbytes > len(payload):
                raise ValueError(f"tensor of shape {shape} and dtype {spec['dtype']} has the wrong size")
            data = bytearray(payload[offset:offset + nbytes])
            flat = torch.frombuffer(data, dtype=dtype) if nbytes else torch.empty(0, dtype=dtype)
            tensors.append(flat.reshape(shape).to(self.device))
            offset += nbytes
        if offset != len(payload):
            raise ValueError("extra bytes after the tensors")
        return tensors

    def _node(self, position: int, node: dict[str, Any]) -> tuple[str, Any, Any, Any]:
        kind = node["op"]
        if kind == "input":
            return ("input", None, None, None)
        if kind == "tensor":
            return ("tensor", self.tensors[int(node["tensor"])], None, None)
        if kind == "output":
            out = self._arg(node["args"], position)
            if isinstance(out, list) and len(out) == 1:
                out = out[0]
            if not isinstance(out, _Ref):
                raise ValueError("the output must be one tensor")
            return ("output", out, None, None)
        if kind != "call":
            raise ValueError(f"unknown node kind {kind!r}")
        args, kwargs = self._arg(node["args"], position), {str(k): self._arg(v, position)
                                                           for k, v in dict(node["kwargs"]).items()}
        if not isinstance(args, list):
            raise ValueError("call arguments must be a list")
        target = str(node["target"])
        if target == "getitem":
            if len(args) != 2 or not isinstance(args[0], _Ref) or type(args[1]) is not int or kwargs:
                raise ValueError("getitem takes a node and an index")
            return ("getitem", None, args, kwargs)
        parts = target.split(".")
        if len(parts) != 3 or parts[0] != "aten":
            self.forbidden.append(target)
            return ("forbidden", target, None, None)
        name, overload = parts[1], parts[2]
        self.ops.add(name)
        if name in _SKIPPED_OPS:
            return ("skip", None, None, None)
        if name not in self.allowed:
            self.forbidden.append(name)
            return ("forbidden", name, None, None)
        packet = getattr(torch.ops.aten, name)
        if overload not in packet.overloads():
            raise ValueError(f"aten.{name} has no overload {overload!r}")
        op = getattr(packet, overload)
        if name in _UNINITIALIZED_OPS:  # this process held answers; never hand the graph stale memory
            return ("call", _zero_filled(op), args, kwargs)
        return ("call", op, args, kwargs)

    def _arg(self, value: Any, position: int) -> Any:
        """Decodes one argument; a node may refer only to nodes before it."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, dict) and len(value) == 1:
            (tag, inner), = value.items()
            if tag == "node":
                if type(inner) is not int or not 0 <= inner < position:
                    raise ValueError(f"node {position} refers to node {inner!r}")
                return _Ref(inner)
            if tag == "list":
                return [self._arg(item, position) for item in inner]
            if tag == "dtype":
                return _DTYPES[inner]
            if tag == "device":
                return self.device  # the graph runs where the scorer runs it
            if tag == "layout":
                return _LAYOUTS[inner]
            if tag == "memory_format":
                return _MEMORY_FORMATS[inner]
        raise ValueError(f"unknown argument {str(value)[:100]}")

    def forward(self, inputs: torch.Tensor) -> Any:
        values: list[Any] = []

        def resolve(value: Any) -> Any:
            if isinstance(value, _Ref):
                return values[value.index]
            if isinstance(value, list):
                return [resolve(item) for item in value]
            return value

        for kind, target, args, kwargs in self.nodes:
            if kind == "input":
                values.append(inputs)
            elif kind == "tensor":
                values.append(target)
            elif kind == "call":
                values.append(target(*resolve(args), **resolve(kwargs)))
            elif kind == "getitem":
                container = resolve(args[0])
                if not isinstance(container, (list, tuple)):
                    raise TypeError("getitem of something that is not a tuple")
                values.append(container[args[1]])
            elif kind == "skip":
                values.append(None)
            elif kind == "output":
                return resolve(target)
            else:
                raise BadGraph(f"operation {target!r} is not allowed in the forward pass")
        raise BadGraph("the graph has no output")


class _Ref:
    """A reference to an earlier node's value."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def batches(path: Path, n: int, batch_size: int, seq_len: int, mask_prob: float, mask_id: int, seed: int):
    data = np.memmap(path, dtype=np.uint16, mode="r")
    rng = np.random.Generator(np.random.PCG64(seed))
    for _ in range(n):
        ix = rng.integers(0, len(data) - seq_len, size=batch_size)
        tokens = np.stack([data[i:i + seq_len] for i in ix]).astype(np.int64)
        mask = rng.random(tokens.shape) < mask_prob
        inputs = np.where(mask, mask_id, tokens)
        yield inputs, tokens, mask


SPLIT_FILES = {"intermediate": "heldout.bin", "final": "final.bin"}
"""The held-out file in the protected folder for each value of the `split` param."""


def ratio_se(sums: list[float], counts: list[int]) -> float | None:
    """Standard error of sum(sums) / sum(counts) over the batches (the ratio estimator's, to first
    order): how far the loss could move on another draw of as many batches. None under two batches."""
    n = len(sums)
    if n < 2 or sum(counts) == 0:
        return None
    ratio = sum(sums) / sum(counts)
    mean_count = sum(counts) / n
    spread = sum((s - ratio * c) ** 2 for s, c in zip(sums, counts, strict=True)) / (n - 1)
    return math.sqrt(spread / n) / mean_count


def score(ctx: dict[str, Any]) -> dict[str, Any]:
    home, solution, protected, device = prepare(ctx)
    split = str(ctx.get("split", "intermediate"))
    if split not in SPLIT_FILES:
        return {"raw": None, "message": {"error": f"unknown split {split!r}: allowed are {', '.join(SPLIT_FILES)}"},
                "details": {}}
    data_path = protected / SPLIT_FILES[split]
    message: dict[str, Any] = {}
    if not os.access(data_path, os.R_OK):
        if split != "intermediate":  # only the harness scores the final split, and it can read it
            return {"raw": None, "message": {"error": f"{data_path} is missing or not readable"}, "details": {}}
        data_path = home / "data" / "val.bin"
        message["note"] = "held-out data not readable here: scored on data/val.bin (use the score tool)"
    vocab, seq_len, batch_size = int(ctx["vocab_size"]), int(ctx["seq_len"]), int(ctx["eval_batch_size"])
    shape_error = f"expected logits of shape [batch, {seq_len}, {vocab}]"
    try:
        reply, confined = export_in_child(ctx, solution, device, (batch_size, seq_len))
        graph = ScoredGraph(reply, device, enforcer.ALLOWED_OPS)
    except (ChildFailed, BadGraph) as exc:
        return {"raw": None, "message": {**message, "error": str(exc)[:600]}, "details": {}}
    if graph.forbidden:
        error = f"rule violation: operation {graph.forbidden[0]!r} is not allowed in the forward pass"
        return {"raw": None, "message": {**message, "error": error},
                "details": {"ops_seen": sorted(graph.ops), "forbidden": sorted(set(graph.forbidden))}}
    total, count = 0.0, 0
    batch_sums: list[float] = []
    batch_counts: list[int] = []
    seen: set[str] = set()
    for inputs, targets, mask in batches(data_path, int(ctx["eval_batches"]), batch_size,
                                         seq_len, float(ctx["mask_prob"]), int(ctx["mask_id"]), seed=0):
        mode = None
        try:
            with torch.no_grad(), enforcer.restricted() as mode:
                logits = graph.forward(torch.from_numpy(inputs).to(device))
        except enforcer.DisallowedOperationError:
            pass
        except Exception as exc:
            return {"raw": None, "message": {**message, "error": f"forward failed: {type(exc).__name__}: {exc}"[:600]},
                    "details": {}}
        assert mode is not None
        seen |= mode.seen
        if mode.violation:
            error = f"rule violation: operation {mode.violation!r} is not allowed in the forward pass"
            return {"raw": None, "message": {**message, "error": error}, "details": {"ops_seen": sorted(seen)}}
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (batch_size, seq_len, vocab):
            found = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            return {"raw": None, "message": {**message, "error": f"forward returned {found}, {shape_error}"},
                    "details": {}}
        rows = logits[torch.from_numpy(mask).to(logits.device)].float().cpu()
        loss = torch.nn.functional.cross_entropy(rows, torch.from_numpy(targets[mask]), reduction="sum")
        total += float(loss)
        count += int(mask.sum())
        batch_sums.append(float(loss))
        batch_counts.append(int(mask.sum()))
    loss_value = total / max(count, 1)
    message["loss"] = round(loss_value, 4)
    if not math.isfinite(loss_value):
        return {"raw": None, "message": {**message, "error": "loss is not finite"}, "details": {}}
    offset = float(ctx["loss_offset"])
    raw = math.log(max(loss_value - offset, 1e-6))
    loss_se = ratio_se(batch_sums, batch_counts)
    # to first order, ln(loss - offset) moves by d(loss) / (loss - offset)
    raw_se = None if loss_se is None else loss_se / max(loss_value - offset, 1e-6)
    return {"raw": raw, "message": message,
            "details": {"loss": loss_value, "masked_tokens": count, "loss_offset": offset, "ops_seen": sorted(seen),
                        "data": data_path.name, "split": split, "loss_se": loss_se, "raw_se": raw_se,
                        "model_confined": confined, "graph_nodes": len(graph.nodes)}}


if __name__ == "__main__":
    print(json.dumps(score(direct_context(__file__)), indent=2))
