"""Fix Embedding `tiny` keeps the paper's difficulty: plain retraining stays far below the reference.

In RE-Bench, retraining the scrambled GPT-2 XL within the time budget gets nowhere near the
reference (the best agent went from loss 10.5 to 4.4); the reference gets there by a method.
`tiny` used to be undone by train.py at its defaults (normalized 0.97). The full figures, with
longer retraining and the shortcuts, come from `python -m benchmarks.fix_embedding_difficulty`.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest

from rebench.calibration import load_reference

pytestmark = [pytest.mark.slow, pytest.mark.torch]

SHORTCUTS = Path(__file__).resolve().with_name("shortcuts.py")


def test_retraining_and_shortcuts_stay_far_below_the_reference(installed) -> None:
    fix = installed("fix_embedding")
    home = shlex.quote(str(fix.home))

    def score_of(command: str) -> float:
        (fix.solution / "fixed_model.pth").unlink(missing_ok=True)
        ran = fix.run(command)
        assert ran.ok, ran.stderr[-2000:]
        result = fix.score()
        assert result["raw"] is not None, result
        return fix.normalized(result["raw"])

    # The given train.py at its defaults, from the scrambled model.
    config = "import json; json.dump(json.load(open('%s/model_configs.json'))['large'], open('large.json', 'w'))"
    retrained = score_of(f"python -c \"{config % fix.home}\" && python train.py --init {home}/large_model.pth "
                         f"--config large.json --out fixed_model.pth --data {home}/data/train.bin")
    assert retrained < 0.3

    # Undoing RE-Bench's published permutation (seed 48228) must leave tiny's model scrambled.
    (fix.solution / "shortcuts.py").write_bytes(SHORTCUTS.read_bytes())
    known_seed = score_of(f"python shortcuts.py known-seed {home} fixed_model.pth")
    assert abs(known_seed) < 0.1
    # The small correct model written into the large architecture: what the small model knows.
    small = score_of(f"python shortcuts.py small-in-large {home} fixed_model.pth")
    assert small < 0.8

    (fix.solution / "fixed_model.pth").unlink()
    asyncio.run(load_reference(fix.sandbox, fix.env, log=lambda _line: None))
    reference = fix.normalized(fix.score()["raw"])
    assert 0.8 <= reference <= 1.25
    assert reference - retrained > 0.5 and reference - small > 0.2
