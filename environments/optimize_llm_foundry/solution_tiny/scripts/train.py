"""Stage 2: train as finetune.yaml says (overrides: key=value ...)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from minifoundry import config, trainer

if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: train.py finetune.yaml [key=value ...]")
    trainer.train(config.load(sys.argv[1], sys.argv[2:]))
