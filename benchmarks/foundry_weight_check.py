"""The Optimize LLM Foundry weight check, measured for the tiny profiles: RE-Bench's measure (the sum
of the L2 norms of the parameters' differences, models loaded as `AutoModel`) and the total L1 norm
rebench used before, for legitimate variations of the training (micro-batches) and for cheats (one
step fewer, another learning rate), each against the training as finetune.yaml says it.

    python -m benchmarks.foundry_weight_check [--profile tiny ci]

Trains in this process with the reference solution's path (scripts/fast_finetune.py: tokenizing in
process, batches loaded in the main process, no evaluation), which writes the same weights as the
starting finetune.sh; PyTorch on one thread, as the scorer runs it. A few minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from rebench.kit import buildutil

ENV = Path(__file__).resolve().parents[1] / "environments" / "optimize_llm_foundry"
VARIANTS: dict[str, list[str]] = {
    "as finetune.yaml says": [],
    "micro-batches of 8": ["device_train_microbatch_size=8"],
    "micro-batches of 1": ["device_train_microbatch_size=1"],
    "one step fewer": ["max_duration=STEPS_LESS_ONE"],
    "learning rate x1.01": ["optimizer.lr=0.00101"],
}


def train(folder: Path, overrides: list[str], out: Path) -> None:
    sys.path.insert(0, str(ENV / "solution_tiny"))
    from minifoundry import config, data, trainer  # type: ignore[import-not-found]

    base, rows = folder / "base_model", folder / "hidden_data.jsonl"
    with tempfile.TemporaryDirectory(prefix="tokens-", dir=folder) as tokens:
        settings = config.load(str(ENV / "solution_tiny" / "finetune.yaml"),
                               [f"data_local={tokens}", f"model_name_or_path={base}", "train_loader.num_workers=0",
                                "eval_loader=null", "save_folder=null", "console_log_interval=0ba", *overrides])
        samples = data.tokenize_rows(data.read_rows(rows), str(base), int(settings["max_seq_len"]))
        data.write_split(samples, os.path.join(tokens, "train"), int(settings["max_seq_len"]))
        model = trainer.train(settings)
    model.save_pretrained(out)


def measure(profile: str) -> list[tuple[str, float, float, float]]:
    params = buildutil.profile_params(ENV, profile)
    build = buildutil.load_file("foundry_build", ENV / "build.py")
    generator = buildutil.load_file("foundry_generator", ENV / "generator.py")
    score = buildutil.load_file("foundry_score", ENV / "scoring" / "score.py")
    rows = int(params["n_rows"])
    steps = -(-rows // 8)  # global_train_batch_size 8, one epoch
    results = []
    with tempfile.TemporaryDirectory(prefix="foundry-weights-") as scratch:
        root = Path(scratch)
        generator.write_jsonl(root / "hidden_data.jsonl",
                              generator.generate(rows, int(params["hidden_seed"]), int(params["max_words"])))
        build.make_base_model(root / "base_model", params["model"], int(params["model_seed"]))
        models: dict[str, dict[str, Any]] = {}
        for name, overrides in VARIANTS.items():
            out = root / f"model-{len(models)}"
            train(root, [item.replace("STEPS_LESS_ONE", f"{steps - 1}ba") for item in overrides], out)
            models[name] = score.read_weights(str(out))[0]
        reference = models["as finetune.yaml says"]
        for name, tensors in models.items():
            norm, largest, why = score.weight_difference(tensors, reference, str(root / "model-0"))
            assert norm is not None and largest is not None, why
            l1 = sum(float((tensors[key].double() - reference[key].double()).abs().sum()) for key in reference)
            results.append((name, norm, largest, l1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", nargs="+", default=["tiny", "ci"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    for profile in args.profile:
        print(f"{profile}: change | sum of L2 norms | largest |diff| | total L1")
        for name, norm, largest, l1 in measure(profile):
            print(f"  {name} | {norm:.4g} | {largest:.3g} | {l1:.4g}")


if __name__ == "__main__":
    main()
