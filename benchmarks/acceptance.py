"""What the environments' acceptance scripts share: run the reference agent, then a replay of the
starting solution, on one fresh database; print each attempt (scores, the scorer's message, the
gateway's meters, wall time); and say whether both normalized scores are where the issue wants them
(the reference in 0.8-1.25, the start within a tolerance of 0). Exits 1 when one is not."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


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


def arguments(doc: str, budget: str) -> argparse.ArgumentParser:
    """--profile, --backend and --budget, with the issue's defaults; a script may add its own."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--budget", default=budget)
    return parser


def reference_and_start(env: str, args: argparse.Namespace, *, start_actions: str, start_label: str,
                        start_tolerance: float, after_first: Callable[[Path], None] | None = None) -> None:
    """The two runs and the verdict. `start_actions`: the replay script's YAML `actions:` list, which
    puts the starting solution in place (if it is not already), scores it and submits."""
    with tempfile.TemporaryDirectory(prefix=f"{env}-acceptance-") as folder:
        db = Path(folder) / "rebench.db"
        script = Path(folder) / "start.yaml"
        script.write_text(start_actions)
        common = ["--profile", args.profile, "--budget", args.budget, "-k", "1", "--backend", args.backend]
        runs = [("reference", ["run", "--env", env, "--agent", "reference", *common]),
                (start_label + " (replay)",
                 ["run", "--env", env, "--agent", "replay", "--agent-arg", f"script={script}", *common])]
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
            if number == 1 and after_first is not None:
                after_first(db)
        reference, start = shown
        ok_reference = reference["normalized"] is not None and 0.8 <= reference["normalized"] <= 1.25
        ok_start = start["normalized"] is not None and abs(start["normalized"]) <= start_tolerance
        print(f"reference normalized {reference['normalized']}: {'ok' if ok_reference else 'NOT in 0.8-1.25'}; "
              f"{start_label} normalized {start['normalized']}: "
              f"{'ok' if ok_start else f'NOT within {start_tolerance} of 0'}")
        if not (ok_reference and ok_start):
            raise SystemExit(1)
