"""Build Activation Sparsity's assets: `python build.py --profile P --out DIR [--assets IN]`.

DIR/home:      model.pth (the dense GPT), model_config.json, data/calibration.bin (the agent's
               calibration text), model.py (the GPT class, a copy of the kit's gpt.py),
               profile_params.json
DIR/protected: heldout.bin, the text every score call measures perplexity and sparsity on;
               final.bin (tiny: the held-out final split, scored once after the attempt,
               docs/heldout.md)

tiny: a GPT trained here on the environment kit's synthetic corpus (deterministic, one thread),
long enough that its layers' inputs are strongly anisotropic (see the README's measurements).
paper: from the operator's assets (a LLaMA-family checkpoint and WikiText-2, declared in
environment.toml); its scorer path needs a GPU and is described in the README.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from rebench.kit import buildutil, corpus, lmtrain
from rebench.kit import gpt as gpt_module
from rebench.kit.gpt import GPT, GPTConfig

HERE = Path(__file__).resolve().parent


def train_model(params: dict, stream: Path) -> GPT:
    """The dense model: trained on the source's exact next-token distributions (soft targets), as
    fix_embedding's build does, so a short CPU build gets a well-trained model."""
    spec = corpus.SourceSpec(**params.get("source", {}))
    targets = torch.from_numpy(corpus.transition_table(spec)).float()
    recipe = params["build_training"]
    torch.manual_seed(recipe["seed"])
    model = GPT(GPTConfig(**params["model_config"]))
    n = spec.n_emit

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits, _ = model(x)
        soft = targets[x[:, :-1], x[:, 1:]]  # P(next | the two tokens before it)
        logp = torch.log_softmax(logits[:, 1:, :n].float(), dim=-1)
        return -(soft * logp).sum(-1).mean()

    lmtrain.train(model, stream, steps=recipe["steps"], batch_size=recipe["batch_size"],
                  block_size=params["model_config"]["block_size"], lr=recipe["lr"], seed=recipe["seed"],
                  weight_decay=recipe.get("weight_decay", 0.1), loss_fn=loss)
    return model.eval()


FINAL_STREAM_SEED = 23
"""tiny: the held-out final split's stream (the training stream, calibration.bin and heldout.bin are 20-22)."""


def build_tiny(params: dict, home: Path, protected: Path) -> None:
    buildutil.seed_everything(0)
    spec = corpus.SourceSpec(**params.get("source", {}))
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    corpus.write_bin(data / "calibration.bin", corpus.generate(spec, params["calibration_tokens"], stream_seed=21))
    corpus.write_bin(protected / "heldout.bin", corpus.generate(spec, params["heldout_tokens"], stream_seed=22))
    # The held-out final split: one more stream of the source, as long as heldout.bin. Each stream has
    # its own generator (seeded by the source and the stream), so heldout.bin is the bytes it was
    # before this file existed, and the intermediate anchors still hold.
    corpus.write_bin(protected / "final.bin", corpus.generate(spec, params["final_tokens"],
                                                              stream_seed=FINAL_STREAM_SEED))
    with tempfile.TemporaryDirectory() as scratch:  # the training stream is the build's own
        stream = Path(scratch) / "train.bin"
        corpus.write_bin(stream, corpus.generate(spec, params["build_training"]["tokens"], stream_seed=20))
        model = train_model(params, stream)
    lmtrain.save_state(model, home / "model.pth")


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, _workspace, protected = buildutil.layout(args.out)
    if args.profile != "tiny":
        raise SystemExit(f"profile {args.profile!r}: only 'tiny' can be built on this machine yet; "
                         "the paper profile's build from the operator's assets is future work (README)")
    build_tiny(params, home, protected)
    (home / "model_config.json").write_text(json.dumps(params["model_config"], indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(gpt_module.__file__, home / "model.py")  # the GPT class, for the agent
    buildutil.write_params(home, args.profile, params)


if __name__ == "__main__":
    main()
