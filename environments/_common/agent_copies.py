"""Copy the environment kit's modules that are part of a task into the files the agent is given.

Trusted code (builds, scorers) imports the kit (rebench/kit) and is never copied. What is
copied here is what the agent sees and may change: the starting model and training loop
in its workspace, the read-only references in its home. Those copies are part of the
environment (its content hash, its version), so pinning them per environment is a feature.
Run `python environments/_common/agent_copies.py` after editing a kit module listed
below; `--check` exits non-zero when a copy differs (a test runs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ENVIRONMENTS = Path(__file__).resolve().parents[1]
KIT = ENVIRONMENTS.parent / "rebench" / "kit"

# kit module -> the agent's copies, relative to environments/ (only workspace/ and home/).
COPIES: dict[str, list[str]] = {
    "gpt.py": [
        "fix_embedding/workspace/model.py",
        "fix_embedding/home/static_model.py",
        "small_scaling_law/workspace/model.py",
        "nanogpt_chat_rl/workspace/model.py",
        "high_norm_tokens/home/model.py",
    ],
    "lmtrain.py": [
        "fix_embedding/workspace/train.py",
    ],
    "torch_rule_enforcer.py": [
        "restricted_mlm/home/torch_rule_enforcer.py",
    ],
}

# Lines a copy changes: the kit imports its sibling modules relatively, the agent's script
# imports the file beside it (train.py runs as a script next to model.py).
REWRITES: dict[str, list[tuple[bytes, bytes]]] = {
    "lmtrain.py": [(b"from .gpt import GPT, GPTConfig\n", b"from model import GPT, GPTConfig\n")],
}


def copy_of(source: str) -> bytes:
    """What the agent's copy of a kit module must contain."""
    data = (KIT / source).read_bytes()
    for old, new in REWRITES.get(source, []):
        if old not in data:
            raise SystemExit(f"rebench/kit/{source} no longer has the line {old.decode().strip()!r} to rewrite")
        data = data.replace(old, new)
    return data


def stale() -> list[str]:
    """The copies that differ from their kit module."""
    out = []
    for source, targets in COPIES.items():
        data = copy_of(source)
        out += [target for target in targets
                if not (ENVIRONMENTS / target).is_file() or (ENVIRONMENTS / target).read_bytes() != data]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale copies")
    args = parser.parse_args()
    bad = stale()
    for target in bad:
        if args.check:
            print(f"stale copy: environments/{target} (run python environments/_common/agent_copies.py)")
            continue
        source = next(name for name, targets in COPIES.items() if target in targets)
        path = ENVIRONMENTS / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(copy_of(source))
        print(f"updated environments/{target}")
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
