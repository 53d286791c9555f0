"""How much faster the kernel environment's reference is than its starting solution on this
machine (tiny profile sizes). The environment promises at least 2x; this prints the figures.

    python benchmarks/kernel_reference_speed.py [--n 4000000] [--repeats 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import torch

ENV = Path(__file__).resolve().parents[1] / "environments" / "triton_cumsum"


def load(folder: str):
    spec = importlib.util.spec_from_file_location(f"kernel_{folder}", ENV / folder / "solution.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.prefix_sum


def median_ms(fn, n: int, repeats: int) -> float:
    generator = torch.Generator().manual_seed(0)
    times = []
    for index in range(repeats + 3):
        x = torch.randint(-10, 10, (n,), dtype=torch.int32, generator=generator)
        started = time.perf_counter()
        fn(x)
        if index >= 3:
            times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = median_ms(load("workspace"), args.n, args.repeats)
    reference = median_ms(load("reference"), args.n, args.repeats)
    print(f"n={args.n} threads={args.threads} repeats={args.repeats}")
    print(f"starting solution : {start:8.2f} ms")
    print(f"reference solution: {reference:8.2f} ms")
    print(f"speed-up          : {start / reference:8.2f}x (target >= 2x)")


if __name__ == "__main__":
    main()
