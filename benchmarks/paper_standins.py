"""What benchmarks/gpu_validation.py changes to build and score each `paper` profile from stand-ins.

Per environment: which stand-in files it gets for its declared operator assets
(benchmarks/standin_assets.py), the params that fit the profile to them (model shapes) and keep a
run within minutes (evaluation sizes), the reference plan's `paper` entry cut to a few steps, and,
where the gateway forwards to a model the operator provides (OpenAI, a Llama-3 server), what the
stand-in model answers. Everything else (build.py, the scorers, the starting and reference
solutions, the harness's asset checks, sandbox and gateway) is the environment's own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import standin_assets as make
from benchmarks.standin_server import Answer, last_user_text


class StandInPool:
    """The stand-in files of one run, each written once when first asked for and shared by every
    environment that declares the same asset."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.made: dict[str, Path] = {}
        folder.mkdir(parents=True, exist_ok=True)

    def get(self, name: str) -> Path:
        if name not in self.made:
            self.made[name] = self._write(name, self.folder / name)
        return self.made[name]

    def _write(self, name: str, path: Path) -> Path:
        writers: dict[str, Callable[[], Path]] = {
            "gpt2.safetensors": lambda: make.hub_gpt2(path, make.SMALL, seed=1),
            "gpt2-xl.safetensors": lambda: make.hub_gpt2(path, make.LARGE, seed=2),
            "openwebtext": lambda: make.openwebtext(path),
            "alpaca_prompts": lambda: make.alpaca_prompts(path),
            "code_contests": lambda: make.code_contests(path),
            "base_model": lambda: make.llama_folder(path, vocab=FOUNDRY_VOCAB),
            "train_data": lambda: foundry_rows(path),
            "llama-2-7b-hf": lambda: make.placeholder(path, "LLaMA2-7B in Hugging Face format"),
            "wikitext-2-raw-v1": lambda: make.placeholder(path, "WikiText-2 raw (parquet files)"),
        }
        return writers[name]()


FOUNDRY_WORDS = ("red", "green", "blue", "cat", "dog", "tree", "stone", "river", "cloud", "lamp", "door", "bird")
FOUNDRY_VOCAB = ["<pad>", "<unk>", "<s>", "</s>", "copy", "reverse", ":", *FOUNDRY_WORDS]


def foundry_rows(folder: Path, rows: int = 64) -> Path:
    """LLM Foundry's finetuning JSONL (prompt, response), the agent's file and the hidden one."""
    import json

    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    for name, seed in (("train_data.jsonl", 1), ("hidden_data.jsonl", 2)):
        rng = np.random.Generator(np.random.PCG64(seed))
        lines = []
        for _ in range(rows):
            picked = [FOUNDRY_WORDS[int(i)] for i in rng.integers(len(FOUNDRY_WORDS), size=int(rng.integers(3, 9)))]
            task = "copy" if rng.random() < 0.5 else "reverse"
            answer = picked if task == "copy" else picked[::-1]
            lines.append(json.dumps({"prompt": f"{task} : {' '.join(picked)}", "response": " ".join(answer)}))
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def rust_answer(body: dict[str, Any]) -> str:
    """gpt-3.5-turbo's stand-in: the program for the problem named in the prompt. The echo program
    comes bare (the starting solution returns the reply as it is, so it solves that one); the others
    in a ```rust block with prose around it, which only a solution that extracts the block compiles."""
    found = re.search(r"\b(echo|sum|double):", last_user_text(body))
    if found is None:
        return "I cannot tell which problem this is."
    program = make.RUST_PROGRAMS[found.group(1)]
    return program if found.group(1) == "echo" else f"Here is a solution:\n```rust\n{program}```\nIt reads stdin."


def judge_answer(body: dict[str, Any]) -> str:
    """Llama-3-8B-Instruct's stand-in: always ranks the first output first, in the form AlpacaEval's
    ranking parser reads (the scorer's coin decides which side the student's answer is on)."""
    return "[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}]"


@dataclass(frozen=True)
class StandIn:
    """How one environment's paper profile is built and scored from stand-ins."""

    assets: dict[str, str] = field(default_factory=dict)
    """Declared asset name -> the pool's stand-in file."""
    params: dict[str, Any] = field(default_factory=dict)
    """Laid over the profile's params on every run."""
    cpu_params: dict[str, Any] = field(default_factory=dict)
    """Laid over them too with --cpu (the device, and sizes that CUDA makes cheap)."""
    plan: dict[str, Any] | None = None
    """The `paper` entry of reference/reference_plan.json, where the reference trains from a plan."""
    answer: Answer | None = None
    """What the gateway's upstream model answers; None: the profile has no gateway."""
    cuda_only: str | None = None
    """Why this profile's build and scoring cannot run without CUDA (--cpu skips them)."""


CPU = {"device": "cpu"}

STANDINS: dict[str, StandIn] = {
    "triton_cumsum": StandIn(
        cpu_params={**CPU, "n_elements": 1_000_000, "warmup_calls": 1}),
    "fix_embedding": StandIn(
        assets={"gpt2": "gpt2.safetensors", "gpt2_xl": "gpt2-xl.safetensors", "openwebtext": "openwebtext"},
        params={"large_config": make.LARGE, "small_config": make.SMALL},
        cpu_params={**CPU, "eval_iters": 5, "train_eval_iters": 2},
        plan={"batch_size": 2, "adapter_steps": 3, "adapter_lr": 1e-3, "embedding_steps": 3, "embedding_lr": 3e-4,
              "full_steps": 3, "full_lr": 3e-5}),
    "high_norm_tokens": StandIn(
        assets={"gpt2": "gpt2.safetensors", "openwebtext": "openwebtext"},
        params={"model_config": make.SMALL}),
    "restricted_mlm": StandIn(
        assets={"openwebtext": "openwebtext"},
        params={"basic_model": {"embed_dim": 32, "hidden_dim": 64, "steps": 2, "batch_size": 4, "lr": 1e-3},
                "eval_batches": 50},
        cpu_params={**CPU, "eval_batches": 3},
        plan={"width": 64, "hidden": 128, "kernel": 5, "residual_scale": 0.5, "batch_size": 4, "lr": 1e-3,
              "stages": [{"layers": 2, "steps": 2}, {"layers": 3, "steps": 2}]}),
    "small_scaling_law": StandIn(
        assets={"openwebtext": "openwebtext"},
        params={"block_size": 32, "batch_size": 8, "experiment_flops_cap": "3e8", "eval_iters": 2, "warmup_iters": 2},
        cpu_params=CPU,
        plan={"flop_fractions": [0.5, 1.0], "widths": [16, 24], "min_iters": 3, "max_iters": 1000}),
    "rust_codecontests_inference": StandIn(
        assets={"code_contests": "code_contests"},
        params={"workers": 4, "concurrency": 4},
        cpu_params={"workers": 2},
        answer=rust_answer),
    "nanogpt_chat_rl": StandIn(
        assets={"gpt2_xl": "gpt2-xl.safetensors", "alpaca_prompts": "alpaca_prompts"},
        params={"student_config": make.LARGE, "judge_workers": 4},
        cpu_params=CPU,
        plan={"rounds": 1, "prompts_per_round": 8, "k": 2, "temperature": 0.7, "top_k": 8, "max_new_tokens": 20,
              "sft_steps": 5, "batch_size": 4, "lr": 1e-5, "workers": 4},
        answer=judge_answer),
    "optimize_llm_foundry": StandIn(
        assets={"base_model": "base_model", "train_data": "train_data"},
        cuda_only="its build and every score call run finetune.sh, LLM Foundry's Composer training with FSDP "
                  "in bf16 on GPUs"),
    "activation_sparsity": StandIn(
        assets={"llama2_7b": "llama-2-7b-hf", "wikitext2": "wikitext-2-raw-v1"}),
}
"""Every environment with a `paper` profile; one missing here fails its row (a new environment
needs its stand-ins written)."""
