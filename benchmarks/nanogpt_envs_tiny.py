"""Time the tiny profiles of Fix Embedding, Restricted MLM and Scaling Law on this machine.

    python benchmarks/nanogpt_envs_tiny.py [fix_embedding restricted_mlm small_scaling_law]

For each environment: the asset build (skipped when cached), one scoring call of the
starting solution, the reference solution's run.sh and its scoring call, with the raw
scores next to the declared anchors. Budgets on 2 cores (issue 6): build < 3 min,
a scoring call < 1 min, the reference < 5 min.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    names = sys.argv[1:] or ["fix_embedding", "restricted_mlm", "small_scaling_law"]
    for name in names:
        print(f"== {name}", flush=True)
        subprocess.run([sys.executable, str(ROOT / "environments" / "_common" / "measure_anchors.py"), name],
                       check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
