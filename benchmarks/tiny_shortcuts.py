"""What the cheapest ways around each tiny task score (issue 25, item 11): the figures of the
environments' READMEs, sections "Shortcuts on `tiny`".

    python -m benchmarks.tiny_shortcuts [ENV ...] [--profile tiny] [--no-anchors]

Each shortcut of benchmarks/shortcut_solutions.py is applied to the starting solution in a fresh
local sandbox laid out by the harness (the calibration's `scoring_sandbox`: the environment
installed, with the gateway where the profile has a judge), as the agent (files written, commands
run in the solution folder), then scored by the real scorer through `run_scoring`, as an attempt's
score calls are. Raw scores are normalized with the declared anchors; for the environments whose
scores are timings the start and the reference are also scored in the same run (one call each,
`measure_anchors`) and the shortcuts normalized against those too, since timings depend on the
machine. Builds what is not built. Minutes per environment on 2 cores (Scaling Law's capped sweep
and Restricted MLM's bigger MLP take the longest).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.shortcut_solutions import SHORTCUTS, Shortcut
from rebench.api import build_environment
from rebench.calibration import load_reference, measure_anchors, scoring_sandbox
from rebench.environments.registry import Environment, EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.sandbox.base import Sandbox
from rebench.scoring.normalize import normalize
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import run_scoring

# What each environment's message says about a score, printed beside it.
SHOWN = ("loss", "seconds", "time_ms", "win_rate_vs_student", "win_rate_vs_student_best_of_4", "frac_flops_used",
         "error")


@dataclass(frozen=True)
class Scored:
    name: str
    result: ScoreResult


async def run_as_agent(sandbox: Sandbox, command: str) -> None:
    ran = await sandbox.exec(command, user="agent", timeout=3 * 3600)
    if not ran.ok:
        raise RebenchError(f"shortcut command {command!r} failed: {(ran.stderr or ran.stdout).strip()[-500:]}")


async def apply(sandbox: Sandbox, shortcut: Shortcut) -> None:
    """The shortcut's files, edits and commands, in the solution folder, with the agent's rights."""
    for name, text in shortcut.files.items():
        await sandbox.agent_write_file(name, text.encode())
    for name, old, new in shortcut.edits:
        text = (await sandbox.agent_read_file(name)).decode()
        if old not in text:
            raise RebenchError(f"the starting {name} has no {old!r} to replace")
        await sandbox.agent_write_file(name, text.replace(old, new).encode())
    for command in shortcut.commands:
        await run_as_agent(sandbox, command)


async def score_shortcut(env: Environment, profile: str, name: str, shortcut: Shortcut) -> list[Scored]:
    """The shortcut scored in a fresh sandbox, then each of its variants in the same sandbox."""
    build_environment(env, profile, "local")
    timeout = env.profile(profile).score_timeout_s
    async with scoring_sandbox(env, profile, "local") as (sandbox, gateway):
        await apply(sandbox, shortcut)
        scored = [Scored(name, await run_scoring(sandbox, timeout, gateway))]
        for variant, command in shortcut.variants.items():
            await run_as_agent(sandbox, command)
            scored.append(Scored(f"{name}: {variant}", await run_scoring(sandbox, timeout, gateway)))
    return scored


async def score_reference(env: Environment, profile: str) -> ScoreResult:
    """The reference solution (its run.sh run first, if it has one) scored in a fresh sandbox."""
    build_environment(env, profile, "local")
    async with scoring_sandbox(env, profile, "local") as (sandbox, gateway):
        await load_reference(sandbox, env, log=lambda text: None)
        return await run_scoring(sandbox, env.profile(profile).score_timeout_s, gateway)


def same_run_anchors(env: Environment, profile: str, log: Callable[[str], None]) -> tuple[float, float]:
    """The start and the reference scored once each, here and now."""
    build_environment(env, profile, "local")
    samples = asyncio.run(measure_anchors(env, profile, backend="local", repeats=1, log=log))
    start, reference = samples.start, samples.reference
    if start[0] is None or reference[0] is None:
        raise RebenchError(f"{env.name}: the start or the reference did not score validly: {start} {reference}")
    return start[0], reference[0]


def line(env: Environment, profile: str, scored: Scored, measured: tuple[float, float] | None) -> str:
    anchors = env.profile(profile).anchors
    raw = scored.result.raw
    shown = {key: scored.result.message[key] for key in SHOWN if key in scored.result.message}
    if raw is None:
        return f"  {scored.name}: invalid {json.dumps(shown)}"
    declared = normalize(raw, anchors.start, anchors.reference, clip=False)
    text = f"  {scored.name}: raw {raw:.4f}, normalized {declared:.3f}"
    if measured is not None:
        text += f" ({normalize(raw, measured[0], measured[1], clip=False):.3f} against this run's start and reference)"
    return f"{text} {json.dumps(shown)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envs", nargs="*", default=list(SHORTCUTS), choices=list(SHORTCUTS), metavar="ENV")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--no-anchors", action="store_true",
                        help="do not score the start and the reference of the timing environments")
    args = parser.parse_args()
    registry = EnvironmentRegistry()
    for name in args.envs:
        env = registry.get(name)
        started = time.monotonic()
        print(f"== {name} ({args.profile})", flush=True)
        measured = None
        if env.profile(args.profile).hardware_dependent and not args.no_anchors:
            measured = same_run_anchors(env, args.profile, log=lambda text: None)
            print(f"  this run's start {measured[0]:.4f}, reference {measured[1]:.4f}", flush=True)
        for shortcut_name, shortcut in SHORTCUTS[name].items():
            for scored in asyncio.run(score_shortcut(env, args.profile, shortcut_name, shortcut)):
                print(line(env, args.profile, scored, measured), flush=True)
        print(f"  ({time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
