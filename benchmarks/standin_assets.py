"""Small stand-ins for the operator assets the `paper` profiles declare, in their real on-disk formats.

The real files (GPT-2 and GPT-2 XL checkpoints, OpenWebText, LLaMA2-7B, deepseek-coder, RE-Bench's
task data) are gigabytes and cannot be downloaded here; benchmarks/gpu_validation.py builds the
paper profiles from these instead, so that every build and scoring step that does not need the real
numbers runs. Each writer makes its file once per pool folder and returns its path. Scores from
stand-ins check the code paths, not the paper's anchors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

GPT2_VOCAB = 50257
SMALL = {"block_size": 128, "vocab_size": GPT2_VOCAB, "n_layer": 4, "n_head": 2, "n_embd": 32, "bias": True}
"""The GPT-2 (small) stand-in: the real model's vocabulary, so OpenWebText's token ids fit, but 4 narrow layers."""
LARGE = {"block_size": 128, "vocab_size": GPT2_VOCAB, "n_layer": 6, "n_head": 2, "n_embd": 48, "bias": True}
"""The GPT-2 XL stand-in (fix_embedding's scrambled model, nanogpt_chat_rl's student)."""
OWT_TRAIN_TOKENS = 200_000
OWT_VAL_TOKENS = 4_100_000
"""restricted_mlm's paper build keeps the last 4,000,000 validation tokens as its held-out split."""
FIRST_TOKEN_SCALE = 50.0
"""How much longer position 0's embedding is than the others': GPT-2's first token has a high norm
from an early layer on, and high_norm_tokens' paper build stops when a model shows none."""


def hub_gpt2(path: Path, config: dict[str, Any], seed: int) -> Path:
    """A GPT-2 `model.safetensors` as the hub ships it (saved from GPT2Model): keys without the
    `transformer.` prefix, attention and MLP matrices as Conv1D (in x out), causal-mask buffers.
    Weights drawn as GPT-2 initialises them; the first position's embedding is made long."""
    from safetensors.numpy import save_file

    rng = np.random.Generator(np.random.PCG64(seed))
    c, block = int(config["n_embd"]), int(config["block_size"])

    def rand(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    wpe = rand(block, c)
    wpe[0] *= FIRST_TOKEN_SCALE * 0.02 * np.sqrt(c) / np.linalg.norm(wpe[0])  # the others' norm: about 0.02 sqrt(c)
    state = {"wte.weight": rand(int(config["vocab_size"]), c), "wpe.weight": wpe,
             "ln_f.weight": np.ones(c, np.float32), "ln_f.bias": np.zeros(c, np.float32)}
    for i in range(int(config["n_layer"])):
        state |= {
            f"h.{i}.ln_1.weight": np.ones(c, np.float32), f"h.{i}.ln_1.bias": np.zeros(c, np.float32),
            f"h.{i}.attn.bias": np.tril(np.ones((block, block), np.float32)).reshape(1, 1, block, block),
            f"h.{i}.attn.c_attn.weight": rand(c, 3 * c), f"h.{i}.attn.c_attn.bias": np.zeros(3 * c, np.float32),
            f"h.{i}.attn.c_proj.weight": rand(c, c), f"h.{i}.attn.c_proj.bias": np.zeros(c, np.float32),
            f"h.{i}.ln_2.weight": np.ones(c, np.float32), f"h.{i}.ln_2.bias": np.zeros(c, np.float32),
            f"h.{i}.mlp.c_fc.weight": rand(c, 4 * c), f"h.{i}.mlp.c_fc.bias": np.zeros(4 * c, np.float32),
            f"h.{i}.mlp.c_proj.weight": rand(4 * c, c), f"h.{i}.mlp.c_proj.bias": np.zeros(c, np.float32),
        }
    save_file(state, str(path), metadata={"format": "pt"})
    return path


def openwebtext(folder: Path) -> Path:
    """`python -m rebench.kit.owt`'s output: train.bin and val.bin, uint16 GPT-2 token ids (random here)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(7))
    for name, count in (("train", OWT_TRAIN_TOKENS), ("val", OWT_VAL_TOKENS)):
        rng.integers(0, GPT2_VOCAB, size=count, dtype=np.uint16).tofile(folder / f"{name}.bin")
    return folder


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def alpaca_prompts(folder: Path, n_train: int = 32, n_test: int = 8) -> Path:
    """nanogpt_chat_rl's task files: train.jsonl, test.jsonl and both baselines' stored answers."""
    prompts = [f"Give one word that rhymes with {word}." for word in
               ("cat", "tree", "sun", "rain", "stone", "light", "sea", "bird", "road", "hill")]
    prompts += [f"Name a colour that starts with the letter {letter}." for letter in "bgryopwtlvcmnsad"]
    prompts += [f"Write a short title for a story about {thing}." for thing in
                ("a lost key", "a quiet town", "a red kite", "an old map", "a late train", "a brave cat",
                 "a cold winter", "a small boat", "a tall tower", "a green door", "a strange letter", "a fast horse",
                 "a broken clock", "a hidden garden")]
    train, test = prompts[:n_train], prompts[n_train:n_train + n_test]
    _jsonl(folder / "train.jsonl", [{"prompt": p} for p in train])
    _jsonl(folder / "test.jsonl", [{"prompt": p} for p in test])
    for name, answer in (("gpt2-xl", "I think the answer is"), ("gpt2-alpaca", "Here is one:")):
        _jsonl(folder / "reference_outputs" / f"{name}.jsonl",
               [{"prompt": p, "output": f"{answer} {i}."} for i, p in enumerate(test)])
    return folder


RUST_PROGRAMS = {
    "echo": 'use std::io::*;\nfn main() { let mut s = String::new(); stdin().read_to_string(&mut s).unwrap(); '
            'print!("{}", s.trim()); }\n',
    "sum": 'use std::io::*;\nfn main() { let mut s = String::new(); stdin().read_to_string(&mut s).unwrap(); '
           'let t: i64 = s.split_whitespace().map(|x| x.parse::<i64>().unwrap()).sum(); println!("{}", t); }\n',
    "double": 'use std::io::*;\nfn main() { let mut s = String::new(); stdin().read_to_string(&mut s).unwrap(); '
              'let n: i64 = s.trim().parse().unwrap(); println!("{}", 2 * n); }\n',
}
"""The stand-in model's answer to each stand-in problem (keyed by the word its description starts with)."""


def _problem(name: str, key: str, description: str, cases: list[tuple[str, str]]) -> dict[str, Any]:
    """A CodeContests row with the dataset's fields and value types; difficulty 7 (A) passes the easy filter."""
    public = {"input": [cases[0][0]], "output": [cases[0][1]]}
    private = {"input": [i for i, _ in cases[1:]], "output": [o for _, o in cases[1:]]}
    return {"name": name, "description": f"{key}: {description}\n\nInput\n\nOne line.\n\nOutput\n\nOne line.",
            "public_tests": public, "private_tests": private, "generated_tests": {"input": [], "output": []},
            "source": 2, "difficulty": 7, "solutions": {"language": [], "solution": []},
            "incorrect_solutions": {"language": [], "solution": []}, "cf_contest_id": 1, "cf_index": "A",
            "cf_points": 500.0, "cf_rating": 800, "cf_tags": ["implementation"], "is_description_translated": False,
            "untranslated_description": "", "time_limit": {"seconds": 2, "nanos": 0},
            "memory_limit_bytes": 256_000_000, "input_file": "", "output_file": ""}


def code_contests(folder: Path) -> Path:
    """valid.jsonl and test.jsonl in the dataset's shape, three easy problems each, plus a hard
    one the filter must drop."""
    def split(prefix: str) -> list[dict[str, Any]]:
        rows = [_problem(f"{prefix}_A. Echo", "echo", "print the input line as it is.",
                         [("hello\n", "hello\n"), ("rust\n", "rust\n")]),
                _problem(f"{prefix}_A. Sum", "sum", "print the sum of the numbers.",
                         [("1 2\n", "3\n"), ("5 6 7\n", "18\n")]),
                _problem(f"{prefix}_A. Double", "double", "print twice the number.",
                         [("4\n", "8\n"), ("-3\n", "-6\n")])]
        return [*rows, {**_problem(f"{prefix}_E. Hard", "echo", "a hard one.", [("x\n", "x\n")]), "difficulty": 3}]

    _jsonl(folder / "valid.jsonl", split("1"))
    _jsonl(folder / "test.jsonl", split("2"))
    return folder


def llama_folder(folder: Path, *, vocab: list[str], layers: int = 2, width: int = 64, positions: int = 4096) -> Path:
    """A Hugging Face LLaMA-architecture model folder (config.json, model.safetensors, tokenizer
    files), randomly initialised, with a word-level tokenizer over `vocab` (specials first)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    ids = {word: index for index, word in enumerate(vocab)}
    core = Tokenizer(models.WordLevel(vocab=ids, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", pad_token="<pad>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(ids), hidden_size=width, intermediate_size=2 * width,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=positions, tie_word_embeddings=False,
                         bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"])
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def placeholder(folder: Path, what: str) -> Path:
    """A folder that only says what it stands for: for a profile whose build does not read it yet."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "STAND-IN.txt").write_text(f"A stand-in for {what}; no build reads it yet.\n", encoding="utf-8")
    return folder
