"""The local model: a short real training run, its numpy export, and the LocalModel contract
(seeded, batched, deterministic generate; token counts; prompt extraction from chat messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rebench.kit.buildutil import load_file

ENV = Path(__file__).resolve().parents[1]


def _load(name: str) -> Any:
    return load_file(f"_rust_codecontests_{name}", ENV / f"{name}.py")


model_mod = _load("model")
generator = _load("generator")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few seconds of real training (a very small network) written the way the build writes it."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("model")
    _load("train_model").train(out, seed=0, steps=30, n_problems=400, d_model=32, n_layer=1, n_head=2,
                               batch_size=8, log_every=0)
    return out


@pytest.mark.slow
@pytest.mark.torch
def test_training_writes_a_model_that_load_reads_from_dir_or_its_parent(trained: Path) -> None:
    assert {p.name for p in trained.iterdir()} == {"weights.npz", "vocab.json", "config.json"}
    assert model_mod.load(trained).name == model_mod.load(trained.parent / trained.name).name
    parent = trained.parent / "build"
    (parent / "model").mkdir(parents=True)
    for f in trained.iterdir():
        (parent / "model" / f.name).write_bytes(f.read_bytes())
    assert model_mod.load(parent).config == model_mod.load(trained).config
    with pytest.raises(FileNotFoundError, match="no model in"):
        model_mod.load(trained.parent / "nothing")


@pytest.mark.slow
@pytest.mark.torch
def test_numpy_inference_matches_the_trained_torch_network(trained: Path) -> None:
    """The cached one-token-at-a-time numpy path gives the logits torch computes on the whole sequence."""
    import torch

    train_model = _load("train_model")
    torch.manual_seed(1)
    net = train_model.GPT(vocab=50, block_size=64, d=32, n_layer=2, n_head=4)
    for p in net.parameters():  # away from the init so every weight matters
        p.data += 0.05 * torch.randn_like(p)
    local = model_mod.load(trained)
    local.w, local.n_layer, local.n_head = net.export(), 2, 4
    ids = [3, 7, 1, 20, 49, 5, 9]
    expected = net(torch.tensor([ids]))[0].detach().numpy()
    cache = [[np.zeros((1, 4, len(ids), 8), np.float32) for _ in range(2)] for _ in range(2)]
    prefix = local._forward(np.array([ids[:4]]), cache, 0)
    np.testing.assert_allclose(prefix[0], expected[3], atol=1e-4)
    for pos in range(4, len(ids)):
        step = local._forward(np.array([[ids[pos]]]), cache, pos)
        np.testing.assert_allclose(step[0], expected[pos], atol=1e-4)


@pytest.mark.slow
@pytest.mark.torch
def test_generate_is_deterministic_per_arguments_and_seeds_differ(trained: Path) -> None:
    local = model_mod.load(trained)
    problem = generator.generate("valid", 1, seed=0)[0]
    content = f"Solve it.\n<problem>\n{problem['description']}\n</problem>"
    prompt = local.chat_prompt([{"role": "user", "content": content}])
    first = local.generate(prompt, n=4, temperature=1.0, max_tokens=40, seed=11)
    again = local.generate(prompt, n=4, temperature=1.0, max_tokens=40, seed=11)
    assert [c.text for c in first] == [c.text for c in again]
    assert len({c.text for c in first}) > 1, "samples of one request should differ"
    other = local.generate(prompt, n=4, temperature=1.0, max_tokens=40, seed=12)
    assert [c.text for c in first] != [c.text for c in other]
    # Sample i does not depend on how many samples the request asked for.
    assert local.generate(prompt, n=1, temperature=1.0, max_tokens=40, seed=11)[0].text == first[0].text
    for c in first:
        assert c.text.startswith("```rust\n")
        assert c.finish_reason in ("stop", "length") and 0 < c.output_tokens <= 40
        assert c.finish_reason == "stop" or c.output_tokens == 40
    greedy = local.generate(prompt, n=3, temperature=0.0, max_tokens=20, seed=5)
    assert len({c.text for c in greedy}) == 1
    empty = local.generate(prompt, n=2, temperature=1.0, max_tokens=0, seed=5)
    assert [(c.output_tokens, c.finish_reason) for c in empty] == [(0, "length")] * 2
    # count_tokens is the model's own tokenization: the prompt costs what the model reads (+ <bos>, <sep>).
    text = problem["description"]
    assert local.count_tokens(text.strip()) + 2 == len(local.tokenizer.prompt_ids(text))
    assert local.count_tokens(problem["description"]) < len(problem["description"].split()) * 2


def test_chat_prompt_takes_the_problem_from_the_last_user_message() -> None:
    messages = [
        {"role": "system", "content": "You are a Rust expert."},
        {"role": "user", "content": "<problem>\nold\n</problem>"},
        {"role": "user", "content": "Please write Rust.\n<problem>\nPrint a + b.\n</problem>\nThanks!"},
    ]
    assert model_mod.extract_description(messages) == "Print a + b."
    parts = [{"role": "user", "content": [{"type": "text", "text": " Print x. "}]}]
    assert model_mod.extract_description(parts) == "Print x."
    assert model_mod.extract_description([{"role": "system", "content": "x"}]) == ""


def test_tokenizer_round_trips_programs_and_counts_unseen_words_by_characters() -> None:
    problems = generator.generate("train", 200, seed=0)
    tokenizer = model_mod.Tokenizer.build([p["description"] for p in problems] + [p["solution"] for p in problems])
    for p in problems[:20]:
        assert tokenizer.decode(tokenizer.encode(p["solution"])) == p["solution"]
    assert len(tokenizer.encode(" zzqxj")) == 6  # unseen word: space + 5 letters
    assert len(tokenizer.encode(" print")) < len(" print")  # known words are one token
    assert tokenizer.encode("fn main() {\n") == [tokenizer.index["fn main() {\n"]]  # boilerplate lines too
    assert len(tokenizer.encode(problems[0]["solution"])) < 60
