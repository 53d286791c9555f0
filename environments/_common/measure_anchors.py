"""Measure an environment's tiny anchors: score the starting solution and the reference solution.

    python environments/_common/measure_anchors.py fix_embedding [--profile tiny] [--skip-reference]

Prints the raw scores and timings; copy them into environment.toml.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sandbox_layout as sl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()
    env = sl.environment(args.name)
    t0 = time.time()
    sl.built_assets(env, args.profile)
    print(f"build: {time.time() - t0:.1f}s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths = sl.lay_out(env, args.profile, Path(tmp) / "start")
        t0 = time.time()
        start = sl.run_score(env, args.profile, paths)
        print(f"start: raw={start['raw']} message={json.dumps(start['message'])} ({time.time() - t0:.1f}s)",
              flush=True)
        if args.skip_reference:
            return
        paths = sl.lay_out(env, args.profile, Path(tmp) / "ref", reference=True)
        t0 = time.time()
        proc = sl.run_reference(paths)
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        print(f"reference run: rc={proc.returncode} ({time.time() - t0:.1f}s)", flush=True)
        t0 = time.time()
        ref = sl.run_score(env, args.profile, paths)
        print(f"reference: raw={ref['raw']} message={json.dumps(ref['message'])} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
