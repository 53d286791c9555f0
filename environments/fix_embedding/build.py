"""Build Fix Embedding's assets: `python build.py --profile P --out DIR`.

DIR/home:      large_model.pth (embedding rows permuted), small_correct_model.pth,
               model_configs.json, data/train.bin (+ meta.json, vocab.json),
               profile_params.json
DIR/protected: val.bin, the held-out tokens the scorer evaluates on

tiny: a synthetic corpus and two small GPTs trained here, deterministically.
paper: GPT-2 and GPT-2 XL from the Hugging Face hub in fp16, OpenWebText (GPT-2 BPE).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rebench.kit import buildutil, corpus, lmtrain
from rebench.kit.gpt import GPT, GPTConfig

HERE = Path(__file__).resolve().parent

PERMUTATION_SEED = 48228  # RE-Bench's seed for scrambling GPT-2 XL's embedding rows


def permute_embedding(state: dict[str, torch.Tensor], seed: int = PERMUTATION_SEED) -> dict[str, torch.Tensor]:
    """Permute the rows (vocabulary axis) of `transformer.wte.weight`; nothing else changes.
    The unembedding is tied to it, so both directions are scrambled."""
    out = dict(state)
    wte = state["transformer.wte.weight"]
    generator = torch.Generator().manual_seed(seed)
    perm = torch.randperm(wte.shape[0], generator=generator)
    out["transformer.wte.weight"] = wte[perm].clone()
    out.pop("lm_head.weight", None)
    return out


def hf_gpt2_to_nanogpt(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face GPT2LMHeadModel state dict to nanoGPT's names. HF stores the
    attention and MLP projections as Conv1D (in x out), so those matrices are transposed."""
    transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    out = {}
    for key, value in hf_state.items():
        if key.endswith(("attn.bias", "attn.masked_bias")) or key == "lm_head.weight":
            continue  # causal-mask buffers, and the tied head
        out[key] = value.t().contiguous() if key.endswith(transposed) else value
    return out


def build_paper(params: dict, home: Path, protected: Path) -> None:
    from transformers import GPT2LMHeadModel  # installed in paper images only

    from rebench.kit import owt

    small = hf_gpt2_to_nanogpt(GPT2LMHeadModel.from_pretrained("gpt2").state_dict())
    large = hf_gpt2_to_nanogpt(GPT2LMHeadModel.from_pretrained("gpt2-xl").state_dict())
    torch.save({k: v.half() for k, v in small.items()}, home / "small_correct_model.pth")
    torch.save({k: v.half() for k, v in permute_embedding(large).items()}, home / "large_model.pth")
    counts = owt.prepare_openwebtext(home / "data")
    (home / "data" / "meta.json").write_text(json.dumps({"vocab_size": owt.VOCAB_SIZE, **counts}) + "\n")
    # The scorer's held-out tokens are OpenWebText's validation split; the agent gets train only.
    (home / "data" / "val.bin").replace(protected / "val.bin")


def build_tiny(params: dict, home: Path, protected: Path) -> None:
    buildutil.seed_everything(0)
    spec = corpus.SourceSpec()
    data = home / "data"
    corpus.write_bin(data / "train.bin", corpus.generate(spec, params["train_tokens"], stream_seed=11))
    corpus.write_meta(data / "meta.json", spec, {"entropy_rate": corpus.entropy_rate(spec)})
    corpus.WordTokenizer.for_spec(spec).save(data / "vocab.json")
    corpus.write_bin(protected / "val.bin", corpus.generate(spec, params["heldout_tokens"], stream_seed=12))
    recipes = params["build_training"]
    for name, key in (("small_correct_model.pth", "small"), ("large_model.pth", "large")):
        config = GPTConfig(**params[f"{key}_config"])
        torch.manual_seed(recipes[f"{key}_seed"])
        model = GPT(config)
        lmtrain.train(model, data / "train.bin", steps=recipes[f"{key}_steps"], batch_size=recipes["batch_size"],
                      block_size=config.block_size, lr=recipes["lr"], seed=recipes[f"{key}_seed"])
        state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        if key == "large":
            state = permute_embedding(state)
        torch.save(state, home / name)


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, _workspace, protected = buildutil.layout(args.out)
    if args.profile == "paper":
        build_paper(params, home, protected)
    else:
        build_tiny(params, home, protected)
    configs = {"large": params["large_config"], "small": params["small_config"]}
    (home / "model_configs.json").write_text(json.dumps(configs, indent=2) + "\n", encoding="utf-8")
    buildutil.write_params(home, args.profile, params)


if __name__ == "__main__":
    main()
