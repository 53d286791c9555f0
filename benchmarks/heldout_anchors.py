"""A profile's held-out final split (docs/heldout.md): its anchors and a probing margin, measured here.

    python -m benchmarks.heldout_anchors ENV [--profile tiny] [--shortcut NAME ...]

One fresh local sandbox laid out by the harness (the calibration's `scoring_sandbox`, the path
`rebench envs calibrate` and an attempt's score calls take): the starting solution is scored with
params.json (the intermediate split every score call uses) and with params-final.json (the held-out
final split), then the reference solution (its run.sh run first) the same way. Printed: each raw
score with its standard error where the scorer reports one (the `raw_se` detail: the spread over
its batches or sequences), the anchors to declare for each split, and the margin: twice the
standard error of the reference's normalized intermediate minus held-out score (each split's raw
standard error over that split's anchor distance, the two combined in quadrature; the scorers are
deterministic, so this sampling error of the evaluation text is the whole of the difference a
solution fitted to neither split shows).

`--shortcut NAME` also scores that shortcut of benchmarks/shortcut_solutions.py on both splits, in
a sandbox of its own: a solution between the anchors, whose normalized gap between the splits is
one draw of that difference. `--file PATH` and `--command CMD` (both repeatable) do the same for a
solution of one's own: the files copied into the starting solution, then the commands run there as
the agent (`{home}` in a command is the sandbox's home folder). Builds what is not built; minutes
per environment on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from pathlib import Path

from benchmarks.shortcut_solutions import SHORTCUTS, Shortcut
from benchmarks.tiny_shortcuts import apply
from rebench.api import build_environment
from rebench.calibration import load_reference, scoring_sandbox
from rebench.environments.install import FINAL_PARAMS_FILE, PARAMS_FILE
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.gateway.attempt import AttemptGateway
from rebench.sandbox.base import Sandbox
from rebench.scoring.normalize import normalize
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import run_scoring

SPLITS = (("intermediate", PARAMS_FILE), ("final", FINAL_PARAMS_FILE))


async def both_splits(sandbox: Sandbox, timeout_s: float, gateway: AttemptGateway | None) -> dict[str, ScoreResult]:
    """The solution in the sandbox scored on each split, one after the other."""
    return {split: await run_scoring(sandbox, timeout_s, gateway, params) for split, params in SPLITS}


async def measure(env: Environment, profile: str) -> tuple[dict[str, ScoreResult], dict[str, ScoreResult]]:
    """(the starting solution's results, the reference's), each per split."""
    timeout_s = env.profile(profile).score_timeout_s
    async with scoring_sandbox(env, profile, "local") as (sandbox, gateway):
        start = await both_splits(sandbox, timeout_s, gateway)
        await load_reference(sandbox, env, log=lambda text: print(f"  {text}", flush=True))
        reference = await both_splits(sandbox, timeout_s, gateway)
    return start, reference


async def measure_shortcut(env: Environment, profile: str, shortcut: Shortcut) -> dict[str, ScoreResult]:
    timeout_s = env.profile(profile).score_timeout_s
    async with scoring_sandbox(env, profile, "local") as (sandbox, gateway):
        home = sandbox.paths.home
        await apply(sandbox, Shortcut(files=shortcut.files, edits=shortcut.edits,
                                      commands=tuple(command.replace("{home}", home) for command in shortcut.commands)))
        return await both_splits(sandbox, timeout_s, gateway)


def raw_se(result: ScoreResult) -> float | None:
    value = result.details.get("raw_se")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def describe(label: str, results: dict[str, ScoreResult], anchors: dict[str, tuple[float, float]] | None) -> None:
    for split, result in results.items():
        if result.raw is None:
            print(f"  {label}, {split}: invalid {result.message}", flush=True)
            continue
        se = raw_se(result)
        text = f"  {label}, {split}: raw {result.raw!r}" + (f" (se {se:.4f})" if se is not None else "")
        if anchors is not None:
            start, reference = anchors[split]
            text += f", normalized {normalize(result.raw, start, reference, clip=False):.3f}"
            if se is not None:
                text += f" (se {se / abs(reference - start):.4f})"
        print(text, flush=True)
    if anchors is not None and all(result.raw is not None for result in results.values()):
        gap = [normalize(float(results[split].raw or 0.0), *anchors[split], clip=False) for split, _ in SPLITS]
        print(f"  {label}: normalized intermediate minus held-out {gap[0] - gap[1]:+.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--shortcut", action="append", default=[], help="a shortcut's name (repeatable)")
    parser.add_argument("--file", action="append", default=[], type=Path,
                        help="a file for a solution of one's own (repeatable)")
    parser.add_argument("--command", action="append", default=[],
                        help="a command making that solution, run as the agent in its folder (repeatable)")
    args = parser.parse_args()
    env = EnvironmentRegistry().get(args.env)
    if env.profile(args.profile).final_split is None:
        raise SystemExit(f"{args.env} ({args.profile}) declares no final_split")
    started = time.monotonic()
    build_environment(env, args.profile, "local")
    start, reference = asyncio.run(measure(env, args.profile))
    invalid = [f"{label} on {split}" for label, results in (("start", start), ("reference", reference))
               for split, result in results.items() if result.raw is None]
    if invalid:
        describe("start", start, None)
        describe("reference", reference, None)
        raise RebenchError(f"{args.env}: not valid: {', '.join(invalid)}")
    anchors = {split: (float(start[split].raw or 0.0), float(reference[split].raw or 0.0)) for split, _ in SPLITS}
    print(f"== {args.env} ({args.profile}), {time.monotonic() - started:.0f} s")
    describe("start", start, anchors)
    describe("reference", reference, anchors)
    errors = [raw_se(reference[split]) for split, _ in SPLITS]
    if all(error is not None for error in errors):
        normalized = [float(error or 0.0) / abs(anchors[split][1] - anchors[split][0])
                      for error, (split, _) in zip(errors, SPLITS, strict=True)]
        combined = math.hypot(*normalized)
        print(f"  reference's normalized intermediate minus held-out: se {combined:.4f} "
              f"({normalized[0]:.4f} and {normalized[1]:.4f}); margin (twice it) {2 * combined:.3f}")
    declared = env.profile(args.profile).anchors
    print(f"  declared intermediate anchors: start {declared.start!r}, reference {declared.reference!r}")
    print(f"  held-out anchors to declare: start = {anchors['final'][0]!r}, reference = {anchors['final'][1]!r}")
    shortcuts = {name: SHORTCUTS[env.name][name] for name in args.shortcut}
    if args.file or args.command:
        shortcuts["own solution"] = Shortcut(files={path.name: path.read_text() for path in args.file},
                                             commands=tuple(args.command))
    for name, shortcut in shortcuts.items():
        began = time.monotonic()
        describe(name, asyncio.run(measure_shortcut(env, args.profile, shortcut)), anchors)
        print(f"  ({time.monotonic() - began:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
