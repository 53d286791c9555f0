"""Measure an environment's anchors here: score the starting solution and the reference solution.

    python environments/_common/measure_anchors.py fix_embedding [--profile tiny] [--repeats 1]

Builds the assets (in the harness cache, keyed by content hash, shared with `rebench run`),
then scores both solutions in one local sandbox through the harness's own calibration path
(`rebench.calibration.measure_anchors`), printing each raw score and the time taken. Copy
the numbers into environment.toml; `rebench envs calibrate` stores them for this machine instead.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from rebench.calibration import measure_anchors
from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    env = EnvironmentRegistry().get(args.name)
    started = time.monotonic()
    assets_dir(env, args.profile, log=print)
    print(f"build: {time.monotonic() - started:.1f}s", flush=True)
    started = time.monotonic()

    def log(line: str) -> None:
        print(f"{line} ({time.monotonic() - started:.1f}s)", flush=True)

    samples = asyncio.run(measure_anchors(env, args.profile, backend="local", repeats=args.repeats, log=log))
    print(f"start: {samples.start}\nreference: {samples.reference}")
    if samples.heldout_start is not None:
        print(f"held-out start: {samples.heldout_start}\nheld-out reference: {samples.heldout_reference}")


if __name__ == "__main__":
    main()
