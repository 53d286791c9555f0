"""The acceptance run of Scaffolding for Rust CodeContests (issue 14's "Done when"), printed.

1. `rebench run --env rust_codecontests_inference --agent reference --profile tiny --budget 20m -k 1`
   on the Docker backend: the reference solution (best-of-8 with public-test filtering) through the
   gateway; expected normalized score 0.8-1.25.
2. A replay of the unchanged starting solution (score, then submit): expected within 0.1 of 0.

Both on a fresh database in a scratch folder; each attempt's scores, the scorer's message,
gateway usage and the wall time are printed. The build (problems and the model's training) is
cached by content hash in the harness's cache, so only a first run pays for it.

    python -m benchmarks.rust_acceptance [--profile tiny] [--backend docker]   (repo root)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = "rust_codecontests_inference"


def rebench(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rebench.cli.app", *args, "--db", str(db)],
                          capture_output=True, text=True)


def show(attempt: int, db: Path) -> dict:
    result = rebench("attempts", "show", str(attempt), "--json", db=db)
    if result.returncode != 0:
        raise SystemExit(f"attempts show {attempt} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def report(label: str, attempt: dict, wall_s: float) -> None:
    print(f"== {label}: attempt {attempt['id']} {attempt['status']}, final raw {attempt['final_raw']}, "
          f"normalized {attempt['normalized']}, wall {wall_s:.0f}s")
    for score in attempt["scores"]:
        message = json.dumps(score["message"])
        print(f"   {score['kind']:12s} raw {score['raw']}  {message}  ({score['duration_s']:.0f}s)")
    for meter, usage in (attempt.get("gateway") or {}).items():
        print(f"   gateway ({meter}): {usage['requests']} requests ({usage['refused']} refused), "
              f"{usage['input_tokens']} in / {usage['output_tokens']} out tokens, ${usage['cost_usd']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--budget", default="20m")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rust-acceptance-") as folder:
        db = Path(folder) / "rebench.db"
        command = ["run", "--env", ENV, "--agent", "reference", "--profile", args.profile, "--budget", args.budget,
                   "-k", "1", "--backend", args.backend]
        print("$ rebench " + " ".join(command), flush=True)
        started = time.monotonic()
        result = rebench(*command, db=db)
        print(result.stdout[-3000:] + result.stderr[-3000:], flush=True)
        if result.returncode != 0:
            raise SystemExit(result.returncode)
        reference = show(1, db)
        report("reference", reference, time.monotonic() - started)

        script = Path(folder) / "start.yaml"
        script.write_text("actions:\n  - score: {}\n  - submit: starting solution\n")
        command = ["run", "--env", ENV, "--agent", "replay", "--agent-arg", f"script={script}", "--profile",
                   args.profile, "--budget", args.budget, "-k", "1", "--backend", args.backend]
        print("$ rebench " + " ".join(command), flush=True)
        started = time.monotonic()
        result = rebench(*command, db=db)
        if result.returncode != 0:
            print(result.stdout[-3000:] + result.stderr[-3000:])
            raise SystemExit(result.returncode)
        start = show(2, db)
        report("starting solution (replay)", start, time.monotonic() - started)

        ok_reference = reference["normalized"] is not None and 0.8 <= reference["normalized"] <= 1.25
        ok_start = start["normalized"] is not None and abs(start["normalized"]) <= 0.1
        print(f"reference normalized {reference['normalized']}: {'ok' if ok_reference else 'NOT in 0.8-1.25'}; "
              f"starting solution normalized {start['normalized']}: {'ok' if ok_start else 'NOT within 0.1 of 0'}")
        if not (ok_reference and ok_start):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
