"""Build Optimize LLM Foundry: `python build.py --profile P --out DIR [--assets IN]`.

tiny, ci: a word-level tokenizer and a small Llama-style causal LM initialised from a seed (saved in
Hugging Face format), the agent's training file and a hidden one (generator.py, different seeds),
and the reference model: the starting finetune.sh run on the hidden file.
paper: the operator's deepseek-coder-1.3b-base folder (asset `base_model`) and 1000-row training
files (asset `train_data`: train_data.jsonl for the agent, hidden_data.jsonl for the scorer).
Both: the reference model is the starting finetune.sh run on the hidden file (paper: on the build
machine's GPUs, as RE-Bench made its reference at task start).

DIR/workspace: the solution folder, a git repository whose first commit is the starting solution
DIR/home:      base_model/ (read-only), train_data.jsonl, profile_params.json
DIR/protected: hidden_data.jsonl, reference_model/ (the weights the scorer compares with)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rebench.kit import buildutil

HERE = Path(__file__).resolve().parent
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "rebench", "GIT_AUTHOR_EMAIL": "rebench@localhost",
                "GIT_COMMITTER_NAME": "rebench", "GIT_COMMITTER_EMAIL": "rebench@localhost",
                "GIT_AUTHOR_DATE": "2024-11-22T00:00:00Z", "GIT_COMMITTER_DATE": "2024-11-22T00:00:00Z"}


def make_base_model(folder: Path, spec: dict, seed: int) -> None:
    """The tokenizer (one id per word of generator.vocabulary()) and a randomly initialised model."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    generator = buildutil.load_file("foundry_generator", HERE / "generator.py")
    vocab = {word: index for index, word in enumerate(generator.vocabulary())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", pad_token="<pad>")
    buildutil.seed_everything(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=int(spec["hidden_size"]),
                         intermediate_size=int(spec["intermediate_size"]), num_hidden_layers=int(spec["layers"]),
                         num_attention_heads=int(spec["heads"]), num_key_value_heads=int(spec["heads"]),
                         max_position_embeddings=int(spec["max_positions"]), tie_word_embeddings=False,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"])
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def make_repository(source: Path, target: Path) -> None:
    """The starting solution as a git repository with one commit (fixed identity and dates, so every
    build makes the same commit): the agent can always see and restore the original."""
    shutil.copytree(source, target, dirs_exist_ok=True)
    env = {**os.environ, **GIT_IDENTITY}
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "The starting finetune.sh"]):
        subprocess.run(["git", "-c", "core.fileMode=true", *command], cwd=target, env=env, check=True)


def run_finetune(solution: Path, base_model: Path, data: Path, into: Path, threads: int) -> None:
    """Run finetune.sh the way the scorer does (a copy of the solution beside the training file and
    the base model) and move its trained_model/ to `into`."""
    with tempfile.TemporaryDirectory(prefix="foundry-build-") as scratch:
        root = Path(scratch)
        shutil.copytree(solution, root / "solution", ignore=shutil.ignore_patterns(".git"))
        shutil.copy(data, root / "train_data.jsonl")
        (root / "base_model").symlink_to(base_model)
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        if threads > 0:  # as the scorer runs it (score.py, run_env)
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        done = subprocess.run(["bash", "finetune.sh"], cwd=root / "solution", env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"finetune.sh failed (exit {done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
        shutil.move(str(root / "solution" / "trained_model"), into)


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, workspace, protected = buildutil.layout(args.out)
    if args.profile == "paper":
        assets = buildutil.need_assets(args)
        shutil.copytree(assets / "base_model", home / "base_model", symlinks=False)
        shutil.copy(assets / "train_data" / "train_data.jsonl", home / "train_data.jsonl")
        shutil.copy(assets / "train_data" / "hidden_data.jsonl", protected / "hidden_data.jsonl")
        make_repository(HERE / "solution_paper", workspace)
        run_finetune(workspace, home / "base_model", protected / "hidden_data.jsonl", protected / "reference_model",
                     int(params.get("torch_threads", 0)))
    else:
        generator = buildutil.load_file("foundry_generator", HERE / "generator.py")
        rows, max_words = int(params["n_rows"]), int(params["max_words"])
        generator.write_jsonl(home / "train_data.jsonl", generator.generate(rows, int(params["data_seed"]), max_words))
        generator.write_jsonl(protected / "hidden_data.jsonl",
                              generator.generate(rows, int(params["hidden_seed"]), max_words))
        make_base_model(home / "base_model", params["model"], int(params["model_seed"]))
        make_repository(HERE / "solution_tiny", workspace)
        run_finetune(workspace, home / "base_model", protected / "hidden_data.jsonl", protected / "reference_model",
                     int(params.get("torch_threads", 0)))
        summary = {"reference_model": sorted(p.name for p in (protected / "reference_model").iterdir())}
        (protected / "reference_model.json").write_text(json.dumps(summary, indent=1) + "\n")
    buildutil.write_params(home, args.profile, params)
    readable(args.out)


def readable(out: Path) -> None:
    """Every built file readable by all (transformers writes weights with mode 0600): the agent reads
    its home's base model, the scorer (group `protected`) the reference model; the harness's copy
    closes /protected to others."""
    for path in out.rglob("*"):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path.stat().st_mode & 0o100 else 0o644)


if __name__ == "__main__":
    main()
