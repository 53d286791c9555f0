"""Build Finetune GPT-2 for QA: `python build.py --profile P --out DIR [--assets IN]`.

tiny, ci: the instruction language of language.py (seeded). The student, a small GPT, is
pretrained on the noisy teacher's answers to generated prompts; the second baseline is that
student finetuned once on its own best-of-n answers (picked by the judge's rubric in this
process); both baselines answer the held-out prompts here, as the scorer samples.
paper: the operator's GPT-2 XL weights, Alpaca prompts and RE-Bench's stored baseline outputs.

DIR/home:      student_model.pt (the starting checkpoint), vocab.json (tiny, ci), profile_params.json,
               annotator/ (the judge's prompt template and request settings, from the alpaca-eval
               package: annotator.py)
DIR/workspace: data/prompts.jsonl (training prompts, no answers, none held out), chat.py and evaluation.py
               (the scorer's sampling and judge client; model.py and rl_finetune.py come from
               the environment's workspace/)
DIR/protected: prompts.jsonl (held-out: what every score call uses), reference_outputs/NAME.jsonl
               (each baseline's answers to them); tiny, ci: final_prompts.jsonl and
               final_reference_outputs/NAME.jsonl, the held-out final split (`n_final` more prompts,
               the held-out draw continued) scored once after the attempt (docs/heldout.md; paper
               has none)
DIR/judge:     world.json, what the gateway's judge (judge.py) knows; never in the sandbox
DIR/model:     training.json (the build's losses and the baselines' rubric means)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rebench.kit import buildutil
from rebench.kit.gpt import GPT, GPTConfig

HERE = Path(__file__).resolve().parent
FINAL_PROMPTS, FINAL_OUTPUTS = "final_prompts.jsonl", "final_reference_outputs"
"""The held-out final split's files in the protected folder (the scorer's `split` = "final")."""
chat = buildutil.load_file("nanogpt_chat_rl_chat", HERE / "scoring" / "chat.py")
language = buildutil.load_file("nanogpt_chat_rl_language", HERE / "language.py")
judge_module = buildutil.load_file("nanogpt_chat_rl_judge", HERE / "judge.py")
annotator = buildutil.load_file("nanogpt_chat_rl_annotator", HERE / "annotator.py")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def sft(model: GPT, tokenizer: Any, pairs: list[tuple[str, str]], *, steps: int, batch_size: int, lr: float,
        seed: int) -> float:
    """Next-token training on the answers of (prompt, answer) pairs; returns the last loss."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 20) * (0.1 + 0.9 * (1 - step / steps))
        x, y = chat.answer_batch(tokenizer, rng.sample(pairs, min(batch_size, len(pairs))), model.config.block_size)
        loss = chat.answer_loss(model, x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()
    return float(loss.detach())


def best_of_n(model: GPT, tokenizer: Any, judge: Any, prompts: list[str], n: int, seed: int) -> list[str]:
    """Each prompt's best of `n` sampled answers by the judge (sequential pairwise comparisons)."""
    samples = [chat.sample(model, tokenizer, prompts, seed=seed + j) for j in range(n)]
    best = []
    for i, prompt in enumerate(prompts):
        winner = samples[0][i]
        for j in range(1, n):
            if not judge.first_preferred(prompt, winner, samples[j][i]):
                winner = samples[j][i]
        best.append(winner)
    return best


def mean_rubric(judge: Any, prompts: list[str], answers: list[str]) -> float:
    return sum(judge.rubric(p, a) for p, a in zip(prompts, answers, strict=True)) / len(prompts)


def held_out_prompts(params: dict[str, Any], seed: int) -> tuple[list[str], list[str]]:
    """tiny/ci: the held-out prompts every score call uses (`n_test`) and the held-out final
    split's (`n_final`, none without it).

    The final prompts are the same draw of held-out prompts continued: `language.prompts` draws
    them one after another and skips a text it already drew, so the two splits share no prompt and
    the first `n_test` are what they were before the final split existed. Kinds with few texts (18
    naming prompts) are mostly used up by the first `n_test`, so the final split has fewer of them
    (README)."""
    n_test = int(params["n_test"])
    drawn = [p.text for p in language.prompts(n_test + int(params.get("n_final", 0)), seed + 1, unique=True)]
    return drawn[:n_test], drawn[n_test:]


@dataclass(frozen=True)
class PromptDraws:
    """Every prompt a tiny/ci build uses: the held-out splits, the agent's training prompts and
    the prompts of the student's pretraining corpus (language.Prompt, the teacher answers them)."""

    test: list[str]
    final: list[str]
    train: list[str]
    corpus: list[Any]


def draw_prompts(params: dict[str, Any], seed: int) -> PromptDraws:
    """All of a build's prompt draws, seeded. The training prompts and the corpus exclude both
    held-out splits, so that neither the agent nor the student saw a prompt either split scores
    (tests/test_chat_prompt_draws.py checks the built `ci`)."""
    test, final = held_out_prompts(params, seed)
    held_out = {*test, *final}
    train = [p.text for p in language.prompts(int(params["n_train_prompts"]), seed + 2, exclude=held_out)]
    corpus = language.prompts(int(params["corpus_size"]), seed + 3, exclude=held_out)
    return PromptDraws(test, final, train, corpus)


def build_tiny(params: dict[str, Any], out: Path, home: Path, workspace: Path, protected: Path) -> None:
    seed = int(params["build_seed"])
    buildutil.seed_everything(seed)
    world = {**language.world(seed), "all_colors": language.COLORS}
    (out / "judge").mkdir(parents=True, exist_ok=True)
    (out / "judge" / "world.json").write_text(json.dumps({"world": world, "templates": language.TEMPLATES},
                                                         indent=1, sort_keys=True) + "\n", encoding="utf-8")
    judge = judge_module.load(out).judge
    vocab = [*chat.SPECIALS, *language.vocabulary()]
    (home / "vocab.json").write_text(json.dumps(vocab) + "\n", encoding="utf-8")
    tokenizer = chat.WordTokenizer(vocab)

    draws = draw_prompts(params, seed)
    test, final, train = draws.test, draws.final, draws.train
    write_jsonl(protected / "prompts.jsonl", [{"prompt": p} for p in test])
    write_jsonl(workspace / "data" / "prompts.jsonl", [{"prompt": p} for p in train])

    started = time.monotonic()
    colors = world["colors"]
    rng = random.Random(f"teacher-{seed}")
    corpus = [(p.text, language.teacher_answer(p, colors, rng)) for p in draws.corpus]
    config = GPTConfig(**params["student_config"])
    if config.vocab_size != len(vocab):
        raise SystemExit(f"student_config vocab_size {config.vocab_size} != the language's {len(vocab)} words")
    student = GPT(config)
    pretrain = params["pretrain"]
    pretrain_loss = sft(student, tokenizer, corpus, steps=int(pretrain["steps"]),
                        batch_size=int(pretrain["batch_size"]), lr=float(pretrain["lr"]), seed=seed)
    chat.save_checkpoint(student, home / "student_model.pt")
    sampling = {"seed": int(params["seed"]), "max_new_tokens": int(params["max_new_tokens"])}
    start_answers = chat.sample(student, tokenizer, test, **sampling)

    second = params["second_baseline"]
    improved = GPT(config)
    improved.load_state_dict(student.state_dict())
    chosen = train[:int(second["prompts"])]
    winners = best_of_n(student, tokenizer, judge, chosen, int(second["n"]), seed=1000)
    second_loss = sft(improved, tokenizer, list(zip(chosen, winners, strict=True)), steps=int(second["steps"]),
                      batch_size=int(pretrain["batch_size"]), lr=float(second["lr"]), seed=seed + 1)
    second_answers = chat.sample(improved, tokenizer, test, **sampling)
    names = list(params["baselines"])
    baselines = dict(zip(names, (student, improved), strict=True))
    for name, answers in zip(names, (start_answers, second_answers), strict=True):
        write_jsonl(protected / "reference_outputs" / f"{name}.jsonl",
                    [{"prompt": p, "output": a} for p, a in zip(test, answers, strict=True)])
    summary: dict[str, Any] = {
        "pretrain_loss": pretrain_loss, "second_baseline_loss": second_loss, "vocab_size": len(vocab),
        "rubric_mean": {names[0]: mean_rubric(judge, test, start_answers),
                        names[1]: mean_rubric(judge, test, second_answers),
                        "best_of_n_winners": mean_rubric(judge, chosen, winners)}}
    if final:
        # The baselines answer the final prompts as the scorer samples them: a call of their own, seed 0.
        write_jsonl(protected / FINAL_PROMPTS, [{"prompt": p} for p in final])
        summary["final_rubric_mean"] = {}
        for name, model in baselines.items():
            answers = chat.sample(model, tokenizer, final, **sampling)
            write_jsonl(protected / FINAL_OUTPUTS / f"{name}.jsonl",
                        [{"prompt": p, "output": a} for p, a in zip(final, answers, strict=True)])
            summary["final_rubric_mean"][name] = mean_rubric(judge, final, answers)
    summary["seconds"] = round(time.monotonic() - started, 1)
    (out / "model").mkdir(parents=True, exist_ok=True)
    (out / "model" / "training.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def build_paper(params: dict[str, Any], assets: Path, home: Path, workspace: Path, protected: Path) -> None:
    """GPT-2 XL as the starting checkpoint, the Alpaca prompts and RE-Bench's stored baseline outputs."""
    # GPT-2's BPE files, fetched once here (like the OpenWebText preparation) into the agent's home,
    # where chat.py's tokenizer reads them: the sandbox has no network.
    os.environ["TIKTOKEN_CACHE_DIR"] = str(home / "tiktoken_cache")
    chat.BPETokenizer(home / "tiktoken_cache")
    fix_build = buildutil.load_file("nanogpt_chat_rl_fix_build", HERE.parent / "fix_embedding" / "build.py")
    config = dict(params["student_config"])
    state = fix_build.load_gpt2(assets / "gpt2-xl.safetensors", config, "GPT-2 XL")
    torch.save({"config": {**config, "dropout": 0.0}, "model_state_dict": state}, home / "student_model.pt")
    prompts = assets / "alpaca_prompts"
    train, test = read_jsonl(prompts / "train.jsonl"), read_jsonl(prompts / "test.jsonl")
    write_jsonl(workspace / "data" / "prompts.jsonl", [{"prompt": row["prompt"]} for row in train])
    write_jsonl(protected / "prompts.jsonl", [{"prompt": row["prompt"]} for row in test])
    for name in params["baselines"]:
        source = prompts / "reference_outputs" / f"{name}.jsonl"
        if not source.is_file():
            raise SystemExit(f"asset alpaca_prompts: {source} is missing; the folder must hold "
                             f"reference_outputs/{name}.jsonl")
        rows = {row["prompt"]: row["output"] for row in read_jsonl(source)}
        missing = [row["prompt"] for row in test if row["prompt"] not in rows]
        if missing:
            raise SystemExit(f"asset alpaca_prompts: {source} has no output for {len(missing)} held-out prompts")
        write_jsonl(protected / "reference_outputs" / f"{name}.jsonl",
                    [{"prompt": row["prompt"], "output": rows[row["prompt"]]} for row in test])


def main() -> None:
    args = buildutil.parse_args(__doc__.splitlines()[0])
    params = buildutil.profile_params(HERE, args.profile)
    home, workspace, protected = buildutil.layout(args.out)
    annotator.write_annotator(home)  # first: the tiny judge reads its template
    if args.profile == "paper":
        build_paper(params, buildutil.need_assets(args), home, workspace, protected)
    else:
        build_tiny(params, args.out, home, workspace, protected)
    for name in ("chat.py", "evaluation.py"):
        shutil.copy(HERE / "scoring" / name, workspace / name)
    buildutil.write_params(home, args.profile, params)


if __name__ == "__main__":
    main()
