"""Cost of the first restricted forward pass in a fresh interpreter: the kit's enforcer against the
same mode wrapped in torch._dynamo.disable, as PyTorch wraps a dispatch mode by default.

The restricted_mlm scorer enters `torch_rule_enforcer.restricted()` once per score call, in a fresh
process. PyTorch wraps a TorchDispatchMode's `__torch_dispatch__` in `torch._dynamo.disable` unless
the mode opts out (`_should_skip_dynamo`), and that wrapper imports torch._dynamo on its first call.
The enforcer opts out; the baseline here is a subclass that takes the wrapper back. Each variant runs
N times in turns; the figures are the median wall and CPU seconds of the child, from `import torch`
to the end of one restricted forward pass.

    python -m benchmarks.enforcer_dispatch [--runs 5]   (from the repo root: the children import rebench from it)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.cli_startup import measure

REPO = Path(__file__).resolve().parents[1]

PROBE = """
import torch
from rebench.kit import torch_rule_enforcer as enforcer
mode_class = enforcer.RestrictedMode
if {baseline}:
    class Wrapped(enforcer.RestrictedMode):
        __torch_dispatch__ = enforcer.RestrictedMode.__torch_dispatch__  # wrapped again at class creation

        @classmethod
        def _should_skip_dynamo(cls):
            return True
    mode_class = Wrapped
layer, x = torch.nn.Linear(64, 64), torch.ones(8, 64)
with torch.no_grad(), mode_class():
    layer(x).relu().sum()
assert "torch._dynamo" in __import__("sys").modules or not {baseline}, "the baseline did not import dynamo"
"""

VARIANTS = {"dynamo.disable wrapper (PyTorch's default)": True, "enforcer as shipped (opted out)": False}


def argv(baseline: bool) -> list[str]:
    return [sys.executable, "-c", PROBE.format(baseline=baseline)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for baseline in VARIANTS.values():  # warm the file cache and .pyc files, and check each variant runs
        subprocess.run(argv(baseline), check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    for _ in range(args.runs):  # in turns, so a slow phase of the machine hits both
        for name, baseline in VARIANTS.items():
            samples[name].append(measure(argv(baseline)))
    print(f"{'variant':<44} {'median wall s':>14} {'median cpu s':>13}  ({args.runs} runs each)")
    for name, runs in samples.items():
        walls, cpus = zip(*runs, strict=True)
        print(f"{name:<44} {statistics.median(walls):>14.3f} {statistics.median(cpus):>13.3f}")


if __name__ == "__main__":
    main()
