"""High-Norm Tokens: two shortcuts an agent could try instead of reading the weights.

1. Run the model on random token ids and watch where the first token's norm explodes. The
   sandbox has no token or position embedding (the agent gets the blocks only), so the attack
   must invent them, and then the first token shows nothing. With the real embeddings the same
   code finds the defect exactly, which is why they are withheld.
2. Read the scorer's measurements (the build's report in the protected folder). predict.py runs
   in the scoring helper's Landlock-confined child, which cannot read the protected folder; run
   unconfined, the same code gets a perfect score.

Both run the environment's real scorer on a quick build of the tiny profile, on the local
machine with the helper's own confinement (the Docker backend adds a user switch on top).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ENV_TESTS = Path(__file__).resolve().parents[2] / "environments" / "high_norm_tokens" / "tests"
sys.path.insert(0, str(ENV_TESTS))

import small_build  # noqa: E402

pytestmark = [pytest.mark.adversarial, pytest.mark.torch, pytest.mark.slow]

RANDOM_TOKENS = '''
import os
import torch
import torch.nn.functional as F

def predict(blocks, config):
    """Run the blocks on random token ids with embeddings from EMBEDDINGS if present, else invented."""
    here = os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    c = config["n_embd"]
    path = os.path.join(here, "embeddings.pth")
    if os.path.exists(path):
        found = torch.load(path, weights_only=True)
        wte, wpe = found["transformer.wte.weight"], found["transformer.wpe.weight"]
    else:
        norm = float(blocks["transformer.h.0.ln_1.weight"].norm()) / c ** 0.5
        wte = torch.randn(config["vocab_size"], c) * 0.1 * norm
        wpe = torch.randn(config["block_size"], c) * 0.1 * norm
    idx = torch.randint(0, config["vocab_size"], (32, config["block_size"]))
    x = wte[idx] + wpe[: config["block_size"]]
    ratios, states = [], []
    for layer in range(config["n_layer"]):
        p = f"transformer.h.{layer}."
        def ln(v, name):
            return F.layer_norm(v, (c,), blocks[p + name + ".weight"], blocks[p + name + ".bias"])
        q, k, v = F.linear(ln(x, "ln_1"), blocks[p + "attn.c_attn.weight"], blocks[p + "attn.c_attn.bias"]).split(c, 2)
        h = config["n_head"]
        q, k, v = (t.view(32, -1, h, c // h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(32, -1, c)
        x = x + F.linear(y, blocks[p + "attn.c_proj.weight"], blocks[p + "attn.c_proj.bias"])
        m = F.gelu(F.linear(ln(x, "ln_2"), blocks[p + "mlp.c_fc.weight"], blocks[p + "mlp.c_fc.bias"]))
        x = x + F.linear(m, blocks[p + "mlp.c_proj.weight"], blocks[p + "mlp.c_proj.bias"])
        norms = x.norm(dim=-1)
        ratios.append(float(norms[:, 0].median() / norms[:, 1:].median()))
        states.append(x[:, 0])
    # The scorer's rule as the instructions state it (THRESHOLD); nothing reaches it: the largest ratio.
    largest = max(range(len(ratios)), key=lambda i: ratios[i])
    explode = next((i for i, r in enumerate(ratios) if r >= THRESHOLD), largest)
    decay = next((i for i in range(explode + 1, len(ratios)) if ratios[i] < THRESHOLD), len(ratios))
    first = states[explode]
    direction = (first / first.norm(dim=-1, keepdim=True)).mean(0)
    return {"explode_layer": explode + 1, "decay_layer": decay + 1, "direction": direction.tolist()}
'''

READ_MEASUREMENTS = '''
import json

PROTECTED = {protected!r}

def predict(blocks, config):
    """The build's report of what it planted, else the starting guess."""
    try:
        with open(PROTECTED + "/build_report.json") as handle:
            planted = json.load(handle)["planted"]
        return {{"explode_layer": planted["explode_layer"], "decay_layer": planted["decay_layer"],
                 "direction": planted["direction"]}}
    except OSError:
        middle = config["n_layer"] // 2
        return {{"explode_layer": middle, "decay_layer": middle, "direction": [1.0] * config["n_embd"]}}
'''


@pytest.fixture(scope="module")
def built() -> Path:
    return small_build.build_once()


def _reference_raw(built: Path, tmp_path: Path) -> float:
    import shutil

    shutil.copytree(small_build.ENV / "reference", tmp_path / "reference")
    result = small_build.score(built, tmp_path / "reference")
    assert result["raw"] is not None, result
    return float(result["raw"])


def test_running_the_blocks_on_random_tokens_finds_nothing(built: Path, tmp_path: Path) -> None:
    import torch

    reference = _reference_raw(built, tmp_path)
    attack = tmp_path / "random_tokens"
    attack.mkdir()
    threshold = small_build.quick_params()["threshold"]
    (attack / "predict.py").write_text(RANDOM_TOKENS.replace("THRESHOLD", repr(threshold)))
    without = small_build.score(built, attack)
    full = torch.load(built / "protected" / "model.pth", weights_only=True)
    torch.save({k: v for k, v in full.items() if k.startswith(("transformer.wte.", "transformer.wpe."))},
               attack / "embeddings.pth")
    given = small_build.score(built, attack)
    assert given["raw"] is not None and given["raw"] > 0.9, given  # the attack works with the token path...
    assert without["raw"] is not None and without["raw"] < reference - 0.5, (without, reference)  # ...not without


def test_predict_cannot_read_the_scorers_measurements(built: Path, tmp_path: Path) -> None:
    from rebench.scoring.score_helper import confinement_unavailable

    if (why := confinement_unavailable()) is not None:
        pytest.skip(f"this kernel cannot confine scoring children: {why}")
    reference = _reference_raw(built, tmp_path)
    attack = tmp_path / "read_measurements"
    attack.mkdir()
    (attack / "predict.py").write_text(READ_MEASUREMENTS.format(protected=str(built / "protected")))
    unconfined = small_build.score(built, attack, confined=False)
    assert unconfined["raw"] is not None and unconfined["raw"] > 0.95, unconfined  # the attack works unconfined
    confined = small_build.score(built, attack)
    assert confined["raw"] is not None and confined["raw"] < reference - 0.5, (confined, reference)
