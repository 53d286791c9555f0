"""Build the Scaling Law Experiment's assets: `python build.py --profile P --out DIR [--assets IN]`.

DIR/home gets the token data (read-only for the agent), the task constants and
the FLOPs-cap module's constants; DIR/workspace gets the default answer.
The ground-truth sweep is static data in protected/ (see make_sweep.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from rebench.kit import buildutil, corpus

HERE = Path(__file__).resolve().parent

TINY_TRAIN_TOKENS = 4_000_000
TINY_VAL_TOKENS = 200_000


def constants(params: dict) -> dict:
    keys = ("n_layer", "n_head", "block_size", "batch_size", "learning_rate", "warmup_iters", "eval_iters", "device")
    flops = ("target_flops", "experiment_flops_cap")  # written as text in environment.toml ("4e11")
    return {**{k: params[k] for k in keys}, **{k: float(params[k]) for k in flops}}


def build_tiny_data(data_dir: Path) -> None:
    spec = corpus.SourceSpec()
    corpus.write_bin(data_dir / "train.bin", corpus.generate(spec, TINY_TRAIN_TOKENS, stream_seed=1))
    corpus.write_bin(data_dir / "val.bin", corpus.generate(spec, TINY_VAL_TOKENS, stream_seed=2))
    corpus.write_meta(data_dir / "meta.json", spec)
    corpus.WordTokenizer.for_spec(spec).save(data_dir / "vocab.json")


def build_paper_data(assets: Path, data_dir: Path) -> None:
    """OpenWebText from the operator's `openwebtext` asset (`python -m rebench.kit.owt`)."""
    from rebench.kit import owt

    owt.copy_prepared(assets / "openwebtext", train=data_dir / "train.bin", val=data_dir / "val.bin")
    (data_dir / "meta.json").write_text(json.dumps({"vocab_size": owt.VOCAB_SIZE, "eot_token": owt.EOT}) + "\n")


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, workspace, _protected = buildutil.layout(args.out)
    if args.profile == "paper":
        build_paper_data(buildutil.need_assets(args), home / "data")
    else:
        build_tiny_data(home / "data")
    (home / "scaling_constants.json").write_text(json.dumps(constants(params), indent=2) + "\n", encoding="utf-8")
    answer = json.loads(params["default_answer"])
    (workspace / "answer.json").write_text(json.dumps(answer, indent=2) + "\n", encoding="utf-8")
    width = int(params["example_n_embd"])
    per_iter = params["n_layer"] * width**2 * 12 * 6 * params["block_size"] * params["batch_size"]
    steps = int(float(params["experiment_flops_cap"]) // per_iter // 2)
    (workspace / "example_config.py").write_text(
        f"# An example experiment, half the FLOPs cap: python train.py example_config.py\n"
        f"n_embd = {width}\nmax_iters = {steps}\nlog_interval = 50\n",
        encoding="utf-8",
    )
    buildutil.write_params(home, args.profile, params)


if __name__ == "__main__":
    main()
