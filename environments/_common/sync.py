"""Copy the shared sources in environments/_common into the environments that use them.

Each environment folder must be self-contained (it is hashed, copied into images and
built on its own), so shared code lives here once and is copied, never imported
across folders. Run `python environments/_common/sync.py` after editing a file here;
`--check` exits non-zero when a copy is stale (a test runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

COMMON = Path(__file__).resolve().parent
ENVIRONMENTS = COMMON.parent

# source file (in _common, or relative to environments/) -> copies, relative to environments/.
# Modules a scorer trusts get a copy beside score.py in scoring/, which the agent cannot
# change; the copies in home/ are for the agent to read and use.
COPIES: dict[str, list[str]] = {
    "gpt.py": [
        "fix_embedding/workspace/model.py",
        "fix_embedding/home/static_model.py",
        "fix_embedding/scoring/static_model.py",
        "fix_embedding/buildlib/model.py",
        "small_scaling_law/workspace/model.py",
    ],
    "lmtrain.py": [
        "fix_embedding/workspace/train.py",
        "fix_embedding/buildlib/lmtrain.py",
    ],
    "corpus.py": [
        "fix_embedding/buildlib/corpus.py",
        "restricted_mlm/buildlib/corpus.py",
        "small_scaling_law/buildlib/corpus.py",
    ],
    "buildutil.py": [
        "fix_embedding/buildlib/buildutil.py",
        "restricted_mlm/buildlib/buildutil.py",
        "small_scaling_law/buildlib/buildutil.py",
    ],
    "restricted_mlm/home/torch_rule_enforcer.py": [
        "restricted_mlm/scoring/torch_rule_enforcer.py",
    ],
    "owt.py": [
        "fix_embedding/buildlib/owt.py",
        "restricted_mlm/buildlib/owt.py",
        "small_scaling_law/buildlib/owt.py",
    ],
}


def _source(name: str) -> Path:
    return COMMON / name if (COMMON / name).is_file() else ENVIRONMENTS / name


def stale() -> list[str]:
    out = []
    for source, targets in COPIES.items():
        data = _source(source).read_bytes()
        for target in targets:
            path = ENVIRONMENTS / target
            if not path.is_file() or path.read_bytes() != data:
                out.append(target)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale copies")
    args = parser.parse_args()
    if args.check:
        bad = stale()
        for target in bad:
            print(f"stale copy: environments/{target} (run python environments/_common/sync.py)")
        return 1 if bad else 0
    for source, targets in COPIES.items():
        data = _source(source).read_bytes()
        for target in targets:
            path = ENVIRONMENTS / target
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
                print(f"updated environments/{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
