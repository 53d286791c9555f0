"""Build High-Norm Tokens' assets: `python build.py --profile P --out DIR [--assets IN]`.

DIR/home:      blocks.pth (the transformer blocks and the final norm only: no token or position
               embedding, so nothing the agent has can run the model on tokens),
               model_config.json, profile_params.json
DIR/protected: model.pth (the whole model), heldout.bin (held-out tokens), build_report.json

tiny: a GPT trained here on the environment kit's synthetic language, then given a first-token
defect by a documented weight change (`plant`, README "The planted defect"), because a model this
small and this briefly trained does not develop one (the build measures and reports it). The
secret layers and directions are drawn from a hash of the trained weights, so they are not in any
file the agent can read and the build stays reproducible.
paper: the operator's GPT-2 small checkpoint (environment.toml), converted to the kit's names and
measured as it is (nothing planted); held-out text is the operator's OpenWebText validation split.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rebench.kit import buildutil, corpus, lmtrain
from rebench.kit.gpt import GPT, GPTConfig

HERE = Path(__file__).resolve().parent
measure = buildutil.load_file("high_norm_tokens_measure", HERE / "scoring" / "measure.py")

HIDDEN_KEYS = ("transformer.wte.", "transformer.wpe.", "lm_head.")
"""What the agent never gets: the token path into (and out of) the model."""


def secret_rng(model: GPT) -> np.random.Generator:
    """A generator seeded by a hash of the trained weights: only the build has them in order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.contiguous().numpy().tobytes())
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest.digest()[:8], "big")))


def zero_mean_orthonormal(rng: np.random.Generator, dim: int, count: int) -> torch.Tensor:
    """`count` orthonormal unit vectors with zero mean over coordinates (LayerNorm keeps them)."""
    raw = rng.standard_normal((dim, count))
    raw -= raw.mean(axis=0, keepdims=True)
    q, _ = np.linalg.qr(raw)
    return torch.from_numpy(q.T.copy()).float()


@torch.no_grad()
def mlp_inputs(model: GPT, idx: torch.Tensor, layer: int) -> torch.Tensor:
    """ln_2 of the residual stream inside block `layer` (1-based), between attention and MLP."""
    x = measure.hidden_states(model, idx)[layer - 1]
    block = model.transformer.h[layer - 1]
    x = x + block.attn(block.ln_1(x))
    return block.ln_2(x), x


@torch.no_grad()
def plant_neurons(model: GPT, idx: torch.Tensor, layer: int, read: torch.Tensor, write: torch.Tensor,
                  amount: torch.Tensor | float, neurons: int) -> dict:
    """Turn `neurons` MLP units of block `layer` (the least used ones) into a detector of the
    first token: each reads `read` from the normed input, fires only above a threshold between
    the first token's values and every other token's, and writes along `write`. Their outputs
    add up to about `amount` along `write` on the first token (a tensor: per calibration
    window, whose mean is used)."""
    normed, _ = mlp_inputs(model, idx, layer)
    ln = model.transformer.h[layer - 1].ln_2
    read = read / ln.weight  # undo the norm's gains: the unit sees the normalized residual's component
    z = (normed - ln.bias) @ read
    first, rest = z[:, 0], z[:, 1:].flatten()
    low, high = float(first.quantile(0.02)), float(rest.quantile(0.999))
    if low <= high:
        raise SystemExit(f"block {layer}: the first token is not separable along the trigger ({low:.2f} <= {high:.2f})")
    threshold = high + 0.2 * (low - high)  # near the others: the units' output varies less with z
    gain = 4.0 / (low - threshold)
    mlp = model.transformer.h[layer - 1].mlp
    units = mlp.c_proj.weight.norm(dim=0).argsort()[:neurons]
    mlp.c_fc.weight[units] = gain * read
    mlp.c_fc.bias[units] = -gain * (threshold + float(ln.bias @ read))
    activation = F.gelu(gain * (first - threshold)).mean() * neurons
    target = float(torch.as_tensor(amount).mean())
    mlp.c_proj.weight[:, units] = (target / float(activation)) * write[:, None]
    return {"threshold": threshold, "first_low": low, "others_high": high, "units": units.tolist()}


@torch.no_grad()
def median_norms(model: GPT, idx: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per layer 0..n_layer: the median norm of the first token's hidden state, and the other tokens'."""
    states = measure.hidden_states(model, idx)
    return ([float(h[:, 0].norm(dim=-1).median()) for h in states],
            [float(h[:, 1:].norm(dim=-1).median()) for h in states])


@torch.no_grad()
def plant(model: GPT, idx: torch.Tensor, rng: np.random.Generator, recipe: dict, threshold: float) -> dict:
    """The documented defect (README): position 0's embedding gets a trigger direction e; block
    L_e's MLP gains units that read e and write a large vector along d (the explosion); block L_d's
    gains units that read d and write -d, cancelling it (the decay, a negative eigenvalue along d).

    Sized so that the measurement (measure.py, threshold `threshold`) finds exactly L_e and L_d with
    a factor `margin` to spare on the calibration windows `idx`: the first token's ratio at least
    threshold x margin at every layer from L_e to L_d - 1, at most threshold / margin at every other
    counted layer (1..n_layer); checked here, and the build stops if it is not so."""
    n_layer, dim = model.config.n_layer, model.config.n_embd
    middle = n_layer // 2
    explode = int(rng.choice([layer for layer in recipe["explode_layers"] if layer != middle]))
    decay = int(rng.choice([layer for layer in range(explode + 2, n_layer + 1) if layer != middle]))
    trigger, direction = zero_mean_orthonormal(rng, dim, 2)
    if rng.random() < 0.5:
        direction = -direction
    high, low = threshold * recipe["margin"], threshold / recipe["margin"]
    span = range(explode, decay)
    quiet = [layer for layer in range(1, n_layer + 1) if layer not in span]
    first, rest = median_norms(model, idx)
    # The trigger stays in the first token's residual stream at every layer, so it is kept below what
    # would lift the first token's ratio above `low` outside the span: first^2 + size^2 <= (low * rest)^2
    # at each quiet layer to start with, then smaller while the measured ratio is still above `low`
    # (the blocks respond to the trigger too).
    room = min((low * rest[layer]) ** 2 - first[layer] ** 2 for layer in quiet)
    if room <= 0:
        raise SystemExit(f"the trained model's first token already has a norm ratio above {low:.2f} at a layer "
                         f"outside {explode}..{decay - 1}: natural ratios "
                         f"{[round(f / r, 2) for f, r in zip(first, rest, strict=True)]}")
    size = min(recipe["trigger_scale"] * rest[0], room ** 0.5)
    embedding = model.transformer.wpe.weight[0].clone()
    for _ in range(40):
        model.transformer.wpe.weight[0] = embedding + size * trigger
        first, rest = median_norms(model, idx)
        if max(first[layer] / rest[layer] for layer in quiet) <= low:
            break
        size *= 0.95
    # The other tokens' norms grow with depth (in a briefly trained model several fold from block 1
    # to the last) while the first token's component along d stays what block L_e wrote, so that
    # is sized on the largest of the other tokens' norms in the span, not on the explosion layer's.
    amount = recipe["explosion_ratio"] * max(rest[layer] for layer in span)
    up = plant_neurons(model, idx, explode, trigger, direction, amount, recipe["neurons"])
    _, before_decay = mlp_inputs(model, idx, decay)
    down = plant_neurons(model, idx, decay, direction, -direction, before_decay[:, 0] @ direction,
                         recipe["neurons"])
    first, rest = median_norms(model, idx)
    ratios = [f / r for f, r in zip(first, rest, strict=True)]
    if min(ratios[layer] for layer in span) < high or max(ratios[layer] for layer in quiet) > low:
        raise SystemExit(f"the planted defect misses its margin on the calibration text: layers {explode}..{decay - 1} "
                         f"need a first-token norm ratio of at least {high:.2f} and layers {quiet} at most "
                         f"{low:.2f}; ratios per layer 0..{n_layer}: {[round(r, 2) for r in ratios]}")
    return {"explode_layer": explode, "decay_layer": decay, "direction": direction.tolist(),
            "trigger": trigger.tolist(), "trigger_norm": size, "explosion_norm": amount,
            "calibration_ratios": ratios, "explosion_units": up, "decay_units": down}


def train_tiny(params: dict, scratch: Path) -> GPT:
    spec = corpus.SourceSpec()
    recipe = params["build_training"]
    stream = scratch / "train.bin"
    corpus.write_bin(stream, corpus.generate(spec, recipe["train_tokens"], stream_seed=21))
    torch.manual_seed(recipe["seed"])
    model = GPT(GPTConfig(**params["model_config"]))
    lmtrain.train(model, stream, steps=recipe["steps"], batch_size=recipe["batch_size"],
                  block_size=params["model_config"]["block_size"], lr=recipe["lr"], seed=recipe["seed"])
    return model.eval()


def build_tiny(params: dict, home: Path, protected: Path) -> dict:
    buildutil.seed_everything(0)
    spec = corpus.SourceSpec()
    recipe = params["plant"]
    block = params["model_config"]["block_size"]
    heldout = corpus.generate(spec, params["heldout_tokens"], stream_seed=22)
    corpus.write_bin(protected / "heldout.bin", heldout)
    with tempfile.TemporaryDirectory() as scratch:
        model = train_tiny(params, Path(scratch))
        calibration = measure.windows(corpus.generate(spec, 100_000, stream_seed=23), recipe["windows"], block, 1)
    test = measure.windows(heldout, params["windows"], block, 0)
    natural = measure.measure(model, test, params["threshold"])
    planted = plant(model, calibration, secret_rng(model), recipe, params["threshold"])
    found = measure.measure(model, test, params["threshold"])
    if (found.explode_layer, found.decay_layer) != (planted["explode_layer"], planted["decay_layer"]):
        raise SystemExit(f"the planted defect did not show on held-out text: planted layers "
                         f"{planted['explode_layer']}, {planted['decay_layer']}, measured {found}")
    return {"natural_ratios": natural.ratios, "natural_explode_layer": natural.explode_layer,
            "planted": planted, "measured": found.__dict__, "model": model}


def hub_gpt2_to_kit(hub: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The hub's GPT-2 `model.safetensors` (GPT2Model keys, Conv1D matrices stored in x out) in the
    kit's nanoGPT names and layout; the causal-mask buffers and the tied head are left out."""
    transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    out = {}
    for key, value in hub.items():
        if key.endswith((".attn.bias", ".attn.masked_bias")) or key == "lm_head.weight":
            continue
        name = key if key.startswith("transformer.") else f"transformer.{key}"
        out[name] = value.t().contiguous() if key.endswith(transposed) else value.float()
    return out


def build_paper(params: dict, assets: Path, protected: Path) -> tuple[GPT, dict]:
    """GPT-2 from the operator's checkpoint, measured on OpenWebText's validation split (the
    held-out text; the training split is not needed and not kept). Nothing is planted."""
    from safetensors.torch import load_file  # in requirements-paper.txt

    model = GPT(GPTConfig(**params["model_config"]))
    state = hub_gpt2_to_kit(load_file(str(assets / "gpt2.safetensors")))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"{assets / 'gpt2.safetensors'} is not GPT-2 small: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    source = assets / "openwebtext" / "val.bin"
    if not source.is_file():
        raise SystemExit(f"{source} is missing; make the folder with `python -m rebench.kit.owt DIR`")
    shutil.copyfile(source, protected / "heldout.bin")
    tokens = np.fromfile(protected / "heldout.bin", dtype="<u2")
    found = measure.measure(model.eval(), measure.windows(tokens, params["windows"],
                                                          params["model_config"]["block_size"], 0),
                            params["threshold"])
    if found.explode_layer is None:
        raise SystemExit(f"GPT-2 shows no high-norm first token at threshold {params['threshold']}: {found.ratios}")
    return model, {"measured": found.__dict__}


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, _workspace, protected = buildutil.layout(args.out)
    if args.profile == "paper":
        model, report = build_paper(params, buildutil.need_assets(args), protected)
    else:
        report = build_tiny(params, home, protected)
        model = report.pop("model")
    state = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    torch.save(state, protected / "model.pth")
    torch.save({k: v for k, v in state.items() if not k.startswith(HIDDEN_KEYS)}, home / "blocks.pth")
    (home / "model_config.json").write_text(json.dumps(params["model_config"], indent=2) + "\n", encoding="utf-8")
    (protected / "build_report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    buildutil.write_params(home, args.profile, {k: v for k, v in params.items() if k not in ("plant",)})
    print(json.dumps({"natural_ratios": [round(r, 2) for r in report.get("natural_ratios", [])],
                      "measured_ratios": [round(r, 2) for r in report["measured"]["ratios"]]}))


if __name__ == "__main__":
    main()
