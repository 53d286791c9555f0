"""The acceptance run of Optimize LLM Foundry (issue 16's "Done when"), printed.

1. `rebench run --env optimize_llm_foundry --agent reference --profile tiny --budget 20m -k 1` on the
   Docker backend. Scores are timings, so on a fresh database the run first calibrates this
   machine's anchors (three scorings of the starting and of the reference solution, medians); the
   reference solution is then scored and re-scored three times (`rescore_best`): expected
   normalized 0.8-1.25.
2. A replay of the unchanged starting solution (score, then submit), re-scored the same way:
   expected within 0.15 of 0.

Both on one fresh database in a scratch folder; the calibration, each attempt's scores (seconds
charged, the weight difference) and the wall time are printed. The build (model, data, the
reference model) and the image are cached by content hash, so only a first run pays for them.

`--leak-check` instead scores, in one Docker sandbox, a finetune.sh that runs the reference but
first copies the hidden training file to /tmp, /dev/shm and a world-writable folder of the agent's
home, and tries to read /protected; it prints the score and what the agent can see afterwards
(expected: a valid score, no copy left, /protected unread).

    python -m benchmarks.foundry_acceptance [--profile tiny] [--backend docker] [--leak-check]   (repo root)
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from benchmarks.acceptance import arguments, reference_and_start

ENV = "optimize_llm_foundry"


def calibration(db: Path) -> str:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select profile, start_raw, reference_raw, samples from calibrations "
                                  "where environment = ?", (ENV,)).fetchall()
    return "; ".join(f"{p}: start {s:.4f}, reference {r:.4f}, samples {samples}" for p, s, r, samples in rows)


LEAKY = """#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")"
cp ../train_data.jsonl /tmp/leak1 && cp ../train_data.jsonl /dev/shm/leak2 \\
  && cp ../train_data.jsonl ~agent/drop/leak3 && ls -l /tmp/leak1 /dev/shm/leak2 ~agent/drop/leak3
cat /protected/hidden_data.jsonl > /dev/null && echo READ-PROTECTED
bash reference.sh
"""


async def leak_check(profile: str) -> None:
    from rebench.calibration import load_reference
    from rebench.environments.build import assets_dir
    from rebench.environments.install import install_environment
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.sandbox.base import SandboxSpec
    from rebench.sandboxes import create_sandbox
    from rebench.scoring.run import run_scoring

    env = EnvironmentRegistry().get(ENV)
    spec = env.profile(profile)
    sandbox = create_sandbox("docker", SandboxSpec(attempt_id=0, environment=ENV, profile=profile,
                                                   cpus=spec.resources.cpus, memory_gb=spec.resources.memory_gb), env)
    await sandbox.start()
    try:
        await install_environment(sandbox, env, profile, assets_dir(env, profile))
        await load_reference(sandbox, env, print)
        await sandbox.exec("cd ~/solution && cp finetune.sh reference.sh && mkdir -p ~/drop && chmod 1777 ~/drop",
                           user="agent", timeout=60)
        await sandbox.write_file(f"{sandbox.paths.solution}/finetune.sh", LEAKY.encode(), user="agent", mode=0o755)
        result = await run_scoring(sandbox, spec.score_timeout_s)
        print(f"score: raw {result.raw} {json.dumps(result.message)}")
        print("the run printed (head):\n" + str(result.details.get("solution_output", ""))[:600])
        look = "ls -la /tmp /dev/shm ~/drop; cat /tmp/leak1 /dev/shm/leak2 ~/drop/leak3 2>&1 | head -3"
        after = await sandbox.exec(look, user="agent", timeout=60)
        print("what the agent sees afterwards:\n" + after.stdout + after.stderr)
    finally:
        await sandbox.stop()


def main() -> None:
    parser = arguments(__doc__, budget="20m")
    parser.add_argument("--leak-check", action="store_true", help="score a finetune.sh that copies the hidden file")
    args = parser.parse_args()
    if args.leak_check:
        asyncio.run(leak_check(args.profile))
        return
    reference_and_start(ENV, args, start_actions="actions:\n  - score: {}\n  - submit: starting solution\n",
                        start_label="starting solution", start_tolerance=0.15,
                        after_first=lambda db: print(f"   calibrated anchors: {calibration(db)}", flush=True))


if __name__ == "__main__":
    main()
