"""The acceptance run of Finetune GPT-2 for QA (issue 15's "Done when"), printed.

1. `rebench run --env nanogpt_chat_rl --agent reference --profile tiny --budget 30m -k 1` on the
   Docker backend: best-of-8 tournaments judged through the gateway, then SFT on the winners;
   expected normalized score 0.8-1.25.
2. A replay of the starting checkpoint (the untuned student copied to finetuned_model, scored,
   submitted): expected within 0.1 of 0.

Both on a fresh database in a scratch folder; each attempt's scores, the scorer's message, the
gateway's meters (the agent's judge calls apart from the scorer's) and the wall time are printed.
The build (the student's pretraining, the baselines' answers) is cached by content hash in the
harness's cache, so only a first run pays for it.

    python -m benchmarks.chat_acceptance [--profile tiny] [--backend docker]   (repo root)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.rust_acceptance import rebench, report, show

ENV = "nanogpt_chat_rl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--budget", default="30m")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chat-acceptance-") as folder:
        db = Path(folder) / "rebench.db"
        common = ["--profile", args.profile, "--budget", args.budget, "-k", "1", "--backend", args.backend]
        runs = [("reference", ["run", "--env", ENV, "--agent", "reference", *common])]
        script = Path(folder) / "start.yaml"
        script.write_text("actions:\n  - bash: cp ../student_model.pt finetuned_model\n  - score: {}\n"
                          "  - submit: the starting checkpoint\n")
        runs.append(("starting checkpoint (replay)",
                     ["run", "--env", ENV, "--agent", "replay", "--agent-arg", f"script={script}", *common]))
        shown = []
        for number, (label, command) in enumerate(runs, start=1):
            print("$ rebench " + " ".join(command), flush=True)
            started = time.monotonic()
            result = rebench(*command, db=db)
            print(result.stdout[-3000:] + result.stderr[-3000:], flush=True)
            if result.returncode != 0:
                raise SystemExit(result.returncode)
            shown.append(show(number, db))
            report(label, shown[-1], time.monotonic() - started)
        reference, start = shown
        ok_reference = reference["normalized"] is not None and 0.8 <= reference["normalized"] <= 1.25
        ok_start = start["normalized"] is not None and abs(start["normalized"]) <= 0.1
        print(f"reference normalized {reference['normalized']}: {'ok' if ok_reference else 'NOT in 0.8-1.25'}; "
              f"starting checkpoint normalized {start['normalized']}: {'ok' if ok_start else 'NOT within 0.1 of 0'}")
        if not (ok_reference and ok_start):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
