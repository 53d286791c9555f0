"""Activation Sparsity: how plans are applied, the anchors, sparsity enforcement and the held-out text.

The scoring tests install the tiny profile in a real local sandbox (built once, cached by
content hash) and score through the harness's own helper, as an attempt does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rebench.kit.buildutil import load_file

torch = pytest.importorskip("torch")

ENV = Path(__file__).resolve().parents[1]


def _sparse_gpt():
    return load_file("activation_sparsity_sparse_gpt_test", ENV / "scoring" / "sparse_gpt.py")


def _model(n_layer: int = 2):
    from rebench.kit.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=16, vocab_size=32, n_layer=n_layer, n_head=2, n_embd=16, bias=True)).eval()


@pytest.mark.torch
def test_a_plan_that_keeps_everything_leaves_the_model_unchanged_whatever_its_transform() -> None:
    """The weight is rewritten to undo the transform and the shift: only the zeros change outputs."""
    sparse = _sparse_gpt()
    model = _model()
    tokens = torch.randint(0, 32, (3, 16))
    dense, _ = model(tokens)
    plan = {}
    for site in sparse.sites(2):
        d = sparse.module_at(model, site).in_features
        q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64))
        plan[site] = {"transform": (q * 2.0).float(), "shift": torch.randn(d), "keep": torch.tensor([d])}
    layers = sparse.apply_plan(model, plan, 2)
    out, _ = model(tokens)
    assert torch.allclose(out, dense, atol=1e-4)
    assert all(layer.zeros == 0 and layer.count > 0 for layer in layers.values())


@pytest.mark.torch
def test_top_k_and_thresholds_zero_what_they_say() -> None:
    sparse = _sparse_gpt()
    linear = torch.nn.Linear(4, 3)
    z = torch.tensor([[1.0, -3.0, 0.5, 2.0]])
    top = sparse.SparseLinear(linear, {"transform": torch.eye(4), "keep": torch.tensor([2])})
    assert top.sparsify(z).tolist() == [[0.0, -3.0, 0.0, 2.0]]
    cut = sparse.SparseLinear(linear, {"transform": torch.eye(4), "threshold": torch.tensor([1.0, 4.0, 0.1, 0.0])})
    assert cut.sparsify(z).tolist() == [[1.0, 0.0, 0.5, 2.0]]


@pytest.mark.torch
@pytest.mark.parametrize(("change", "message"), [
    (lambda e, d: e.update(transform=torch.zeros(d, d)), "condition number"),
    (lambda e, d: e.update(transform=torch.eye(d - 1)), "transform must be a tensor of shape"),
    (lambda e, d: e.update(threshold=torch.zeros(d)), "exactly one of"),
    (lambda e, d: e.update(extra=torch.zeros(d)), "an entry is a dict"),
    (lambda e, d: e.update(shift=torch.full((d,), float("nan"))), "non-finite"),
])
def test_malformed_plans_are_refused_with_the_reason(change, message: str) -> None:
    sparse = _sparse_gpt()
    model = _model(1)
    plan = {site: {"transform": torch.eye(sparse.module_at(model, site).in_features), "keep": torch.tensor([1])}
            for site in sparse.sites(1)}
    site = sparse.sites(1)[0]
    change(plan[site], sparse.module_at(model, site).in_features)
    with pytest.raises(ValueError, match=message):
        sparse.apply_plan(model, plan, 1)
    with pytest.raises(ValueError, match="missing"):
        sparse.apply_plan(_model(1), {k: v for k, v in plan.items() if k != site}, 1)


def _use_reference(solution: Path) -> None:
    shutil.copyfile(ENV / "reference" / "sparsify.py", solution / "sparsify.py")


@pytest.mark.slow
@pytest.mark.torch
def test_starting_solution_scores_the_start_anchor_and_the_reference_its_own(installed) -> None:
    env = installed("activation_sparsity")
    start = env.score()
    assert start["raw"] is not None, start
    assert abs(env.normalized(start["raw"])) < 0.05, start
    assert start["details"]["plan_confined"] is True and start["details"]["data"] == "heldout.bin"
    assert min(start["details"]["sparsity"].values()) >= 0.4 - 0.005
    _use_reference(env.solution)
    reference = env.score()
    assert 0.95 < env.normalized(reference["raw"]) < 1.05, reference
    assert reference["details"]["ppl_sparse"] < start["details"]["ppl_sparse"]


LOW_THRESHOLDS = '''
"""Thresholds calibrated for 40% sparsity, then halved: fewer zeros, a better perplexity."""
import torch

import sparse_gpt


def make_plan(model, calibration, target):
    inputs = sparse_gpt.collect_inputs(model, calibration[:64], model.config.n_layer)
    plan = {{}}
    for site, x in inputs.items():
        cut = x.abs().flatten().quantile(target) * {factor}
        plan[site] = {{"transform": torch.eye(x.shape[1]), "threshold": torch.full((x.shape[1],), float(cut))}}
    return plan
'''


@pytest.mark.slow
@pytest.mark.torch
def test_a_plan_below_the_target_sparsity_is_invalid_and_one_at_it_is_scored(installed) -> None:
    """Thresholds let the zeros vary with the text: the scorer counts them on the held-out text
    itself, so a plan that buys perplexity with less sparsity is refused."""
    env = installed("activation_sparsity")
    (env.solution / "sparsify.py").write_text(LOW_THRESHOLDS.format(factor=0.5))
    lowered = env.score()
    assert lowered["raw"] is None and "below the target" in lowered["message"]["error"], lowered
    assert lowered["details"]["ppl_sparse"] < 1e9
    (env.solution / "sparsify.py").write_text(LOW_THRESHOLDS.format(factor=1.1))
    honest = env.score()
    assert honest["raw"] is not None, honest


PEEKING_PLAN = '''
"""A hostile plan: it tries to read the held-out text, by path and through the scorer's memory."""
import os

REPORT = []


def attempt(label, action):
    try:
        action()
        outcome = "READ"
    except OSError as exc:
        outcome = type(exc).__name__
    REPORT.append(f"{{label}} {{outcome}}")


def read_parent_memory():
    parent = os.getppid()
    start = int(open(f"/proc/{{parent}}/maps").readline().split("-")[0], 16)
    with open(f"/proc/{{parent}}/mem", "rb") as memory:
        memory.seek(start)
        memory.read(16)


def make_plan(model, calibration, target):
    attempt("heldout", lambda: open("{heldout}", "rb").read(16))
    attempt("listing", lambda: os.listdir("{protected}"))
    attempt("parent-memory", read_parent_memory)
    raise RuntimeError("peek: " + "; ".join(REPORT))
'''
PEEK_REPORT = "peek: heldout PermissionError; listing PermissionError; parent-memory PermissionError"


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.adversarial
def test_sparsify_cannot_read_the_held_out_text_while_it_is_scored(installed) -> None:
    """The scorer holds the held-out text; make_plan runs in a confined child that must not reach
    it, by path or through the scorer's memory (unconfined, the same file reads it: README)."""
    env = installed("activation_sparsity")
    heldout = env.protected / "heldout.bin"
    assert heldout.stat().st_size > 0
    (env.solution / "sparsify.py").write_text(PEEKING_PLAN.format(heldout=heldout, protected=env.protected))
    result = env.score()
    assert result["raw"] is None and PEEK_REPORT in result["message"]["error"], result
