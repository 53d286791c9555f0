"""Fix Embedding `tiny`: plain retraining and the cheapest shortcuts against the reference solution.

    python -m benchmarks.fix_embedding_difficulty [--skip-longer]

Builds `tiny` (cached by content hash), installs it in one local sandbox the way an attempt is,
and for each line starts from an empty solution folder, runs its commands as the agent and
scores the result through the harness (run_scoring). Printed: validation loss, raw score,
normalized score with the declared anchors, and the seconds the commands took.

The goal (issue 25, item 9): the given train.py at its defaults and a plain longer retraining
stay below 0.3; the reference solution scores 0.8-1.25; plain retraining for as long as the
reference runs is far below it; the shortcuts (item 11) stay well below the reference.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from rebench.calibration import load_reference, scoring_sandbox
from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry
from rebench.sandbox.base import Sandbox
from rebench.scoring.normalize import normalize
from rebench.scoring.result import ScoreResult
from rebench.scoring.run import run_scoring

ROOT = Path(__file__).resolve().parents[1]
SHORTCUTS = ROOT / "environments" / "fix_embedding" / "tests" / "shortcuts.py"
GOAL_RETRAINING = 0.3
GOAL_REFERENCE = (0.8, 1.25)
DEFAULT_STEPS = 500  # train.py's default --steps


@dataclass
class Line:
    name: str
    loss: float | None
    raw: float | None
    normalized: float | None
    seconds: float


def train_command(home: str, extra: str = "") -> str:
    """train.py as the agent would run it on the large model, starting from the scrambled one."""
    return (f"python -c \"import json; json.dump(json.load(open('{home}/model_configs.json'))['large'], "
            f"open('large.json', 'w'))\" && python train.py --init {shlex.quote(home)}/large_model.pth "
            f"--config large.json --out fixed_model.pth --data {shlex.quote(home)}/data/train.bin {extra}")


async def clear(sandbox: Sandbox) -> None:
    ran = await sandbox.exec("rm -f fixed_model.pth large.json shortcuts.py", user="agent", timeout=60)
    if not ran.ok:
        raise SystemExit(f"could not clear the solution folder: {ran.stderr[-300:]}")


async def measure(sandbox: Sandbox, name: str, command: str | None, timeout_s: float,
                  anchors: tuple[float, float], files: dict[str, bytes] | None = None) -> Line:
    await clear(sandbox)
    for file_name, data in (files or {}).items():
        await sandbox.write_file(f"{sandbox.paths.solution}/{file_name}", data)
    began = time.monotonic()
    if command is not None:
        ran = await sandbox.exec(command, user="agent", timeout=3600)
        if not ran.ok:
            raise SystemExit(f"{name}: the command failed: {ran.stderr[-500:]}")
    seconds = time.monotonic() - began
    return scored(name, await run_scoring(sandbox, timeout_s), seconds, anchors)


def scored(name: str, result: ScoreResult, seconds: float, anchors: tuple[float, float]) -> Line:
    loss = result.message.get("loss_validation")
    value = None if result.raw is None else normalize(result.raw, anchors[0], anchors[1], clip=False)
    line = Line(name, loss, result.raw, value, seconds)
    shown = "-" if value is None else f"{value:.3f}"
    print(f"  {name:42} loss {loss}  raw {result.raw}  normalized {shown}  ({seconds:.0f} s)", flush=True)
    return line


async def run(skip_longer: bool) -> list[Line]:
    env = EnvironmentRegistry(ROOT / "environments").get("fix_embedding")
    spec = env.profile("tiny")
    anchors = (spec.anchors.start, spec.anchors.reference)
    assets_dir(env, "tiny", log=print)
    lines: list[Line] = []
    async with scoring_sandbox(env, "tiny", "local") as (sandbox, _gateway):
        home = sandbox.paths.home
        lines.append(await measure(sandbox, "start (the scrambled model)", None, spec.score_timeout_s, anchors))
        lines.append(await measure(sandbox, "train.py defaults (500 steps, batch 16, lr 1e-3)",
                                   train_command(home), spec.score_timeout_s, anchors))
        if not skip_longer:
            lines.append(await measure(sandbox, "longer retraining (1000 steps, batch 32, lr 3e-3)",
                                       train_command(home, "--steps 1000 --batch_size 32 --lr 3e-3"),
                                       spec.score_timeout_s, anchors))
            lines.append(await measure(sandbox, "embedding only (--only wte, 1000 steps, lr 3e-3)",
                                       train_command(home, "--only wte --steps 1000 --batch_size 32 --lr 3e-3"),
                                       spec.score_timeout_s, anchors))
        for shortcut in ("known-seed", "small-in-large"):
            command = f"python shortcuts.py {shortcut} {shlex.quote(home)} fixed_model.pth"
            lines.append(await measure(sandbox, f"shortcut: {shortcut}", command, spec.score_timeout_s, anchors,
                                       files={"shortcuts.py": SHORTCUTS.read_bytes()}))
        await clear(sandbox)
        began = time.monotonic()
        await load_reference(sandbox, env, log=lambda _line: None)
        reference_s = time.monotonic() - began
        lines.append(scored("reference (run.sh)", await run_scoring(sandbox, spec.score_timeout_s), reference_s,
                            anchors))
        # Plain retraining given what the reference took: train.py's defaults, fewer steps.
        per_step = lines[1].seconds / DEFAULT_STEPS
        steps = max(1, int(reference_s / per_step))
        lines.append(await measure(sandbox, f"retraining as long as the reference ({steps} steps)",
                                   train_command(home, f"--steps {steps}"), spec.score_timeout_s, anchors))
    return lines


def verdict(lines: list[Line]) -> None:
    by_name = {line.name.split(" (")[0]: line for line in lines}
    retraining = [by_name[n] for n in ("train.py defaults", "longer retraining") if n in by_name]
    reference = by_name["reference"]
    ok = all(line.normalized is not None and line.normalized < GOAL_RETRAINING for line in retraining)
    low, high = GOAL_REFERENCE
    ok_ref = reference.normalized is not None and low <= reference.normalized <= high
    print(f"\ngoal: retraining < {GOAL_RETRAINING}: {'met' if ok else 'NOT met'}; "
          f"reference in [{low}, {high}]: {'met' if ok_ref else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-longer", action="store_true", help="leave out the 1000-step retraining lines")
    args = parser.parse_args()
    print("Fix Embedding tiny, local backend, one sandbox; normalized with the declared anchors")
    verdict(asyncio.run(run(args.skip_longer)))


if __name__ == "__main__":
    main()
