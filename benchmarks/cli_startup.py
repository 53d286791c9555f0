"""Start-up cost of the command line: `rebench --help` and `rebench envs list`, against a bare Typer app,
two commands that only read a database (`attempts list`, `report --json`), and making a new database
from the head schema's script beside making it by the migrations (what every command that made one
did before; the same Store, with the script turned off).

Each command runs in a fresh interpreter N times; the figures are the median wall and CPU
(user + system) seconds of the child process. The goal for `rebench --help` is under 0.3 s
on a 2-core machine, where a minimal Typer app takes about 0.2 s. The database commands read
METR's public runs (../shared/data, imported into a temporary database first; without that file
their rows are left out): a read-only command should cost its imports and its query, not the
model gateway's server or Alembic's migrations.

    python -m benchmarks.cli_startup [--runs 7]   (from the repo root)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BARE_TYPER = (
    "import typer\n"
    "app = typer.Typer(add_completion=False)\n"
    "@app.command()\n"
    "def hello() -> None:\n    '''Say hello.'''\n"
    "@app.command()\n"
    "def bye() -> None:\n    '''Say bye.'''\n"
    "app()\n"
)

COMMANDS = {
    "bare typer app --help": [sys.executable, "-c", BARE_TYPER, "--help"],
    "rebench --help": [sys.executable, "-m", "rebench.cli.app", "--help"],
    "rebench envs list": [sys.executable, "-m", "rebench.cli.app", "envs", "list"],
    "rebench run --help": [sys.executable, "-m", "rebench.cli.app", "run", "--help"],
}


NEW_DATABASE = ("import sys, uuid\nfrom rebench.store import head_schema\nfrom rebench.store.db import Store\n"
                "if sys.argv[2] == 'migrations':\n    head_schema.create = lambda path: False\n"
                "Store(f'{sys.argv[1]}/{uuid.uuid4().hex}.db').close()\n")


def new_database_commands(folder: Path) -> dict[str, list[str]]:
    return {f"new database ({how})": [sys.executable, "-c", NEW_DATABASE, str(folder), how]
            for how in ("script", "migrations")}


def measure(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of argv in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env={**os.environ, "COLUMNS": "100"})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


METR_RUNS = Path(__file__).resolve().parents[2] / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"


def database_commands(folder: Path) -> dict[str, list[str]]:
    """The read-only commands, on a database of METR's runs made in `folder`; none without the file."""
    if not METR_RUNS.is_file():
        print(f"({METR_RUNS} not found: the database commands are left out)")
        return {}
    db = str(folder / "metr.db")
    subprocess.run([sys.executable, "-m", "rebench.cli.app", "import", "metr-runs", str(METR_RUNS), "--db", db],
                   stdout=subprocess.DEVNULL, check=True)
    return {"rebench attempts list": [sys.executable, "-m", "rebench.cli.app", "attempts", "list", "--db", db],
            "rebench report --json": [sys.executable, "-m", "rebench.cli.app", "report", "--json", "--db", db]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rebench-cli-startup-") as folder:
        commands = {**COMMANDS, **database_commands(Path(folder)), **new_database_commands(Path(folder))}
        print(f"{'command':<24} {'median wall s':>14} {'median cpu s':>13}  ({args.runs} runs each)")
        for name, argv in commands.items():
            report(name, argv, args.runs)


def report(name: str, argv: list[str], runs: int) -> None:
    """One row: median wall and CPU seconds over `runs`, after one run that warms the caches."""
    measure(argv)  # warm the file cache and .pyc files
    walls, cpus = zip(*(measure(argv) for _ in range(runs)), strict=True)
    print(f"{name:<24} {statistics.median(walls):>14.3f} {statistics.median(cpus):>13.3f}")


if __name__ == "__main__":
    main()
