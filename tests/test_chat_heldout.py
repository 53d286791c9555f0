"""nanogpt_chat_rl's held-out final split (`final_split`, docs/heldout.md) on the `ci` profile, with
real parts: the built prompts and baselines, the hidden judge behind the gateway, the real scorer,
the reference agent's RL, the CLI on the local backend and the report.

A checkpoint fitted to the held-out prompts every score call uses stands for an agent that probed
them: the test, privileged, reads the built /protected/prompts.jsonl, takes for each prompt the
best of 64 of the student's own answers by the hidden judge's rubric, and finetunes the student on
those answers, mixed with the student's own answers to the training prompts so that elsewhere it
stays the student. A `replay` agent submits it. Its intermediate score is above the reference's
while its held-out final is below the reference's (what it learnt of the answers' form carries over
to prompts neither it nor the student saw, so it is no longer at the start's, as it was while the
final prompts were training prompts), so the report shows a large held-out gap and flags it; the
reference's RL improves the prompts of both splits alike (relative to each split's anchors), so its
gap is about zero. The reference's attempt is the session's (tests/reference_runs.py); this test adds
the fitted checkpoint's attempt to a copy of its database.

Slow: the `ci` build (shared with tests/test_chat_env_model.py's cache), the reference's RL and
the fitting."""

from __future__ import annotations

import json
import random
import sqlite3
import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from rebench.api import build_environment, report
from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry

from .conftest import REPO, RecordedRun, run_cli
from .reference_runs import chat_reference_run  # noqa: F401
from .test_chat_env import chat, judge_module, score_module

ENV = "nanogpt_chat_rl"
ENV_DIR = REPO / "environments" / ENV
PARAMS = tomllib.loads((ENV_DIR / "environment.toml").read_text())["profiles"]["ci"]["params"]

pytestmark = pytest.mark.slow


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fitted_checkpoint(built: Path, out: Path, *, n: int = 64, steps: int = 300) -> None:
    """The student finetuned on the best of `n` of its own answers to each intermediate held-out
    prompt (the hidden judge's rubric picks), mixed half and half with its own answers to the
    training prompts; sampled as the student is (no `generation` entry)."""
    judge = judge_module.load(built).judge
    tokenizer = chat.load_tokenizer(built / "home")
    model, _ = score_module.load_checkpoint(built / "home" / "student_model.pt", PARAMS["student_config"])
    held_out = [row["prompt"] for row in read_jsonl(built / "protected" / "prompts.jsonl")]
    samples = [chat.sample(model, tokenizer, held_out, seed=100 + j) for j in range(n)]
    fitted = [(prompt, max((answers[i] for answers in samples), key=lambda answer: judge.rubric(prompt, answer)))
              for i, prompt in enumerate(held_out)]
    train = [row["prompt"] for row in read_jsonl(built / "workspace" / "data" / "prompts.jsonl")]
    own = list(zip(train, chat.sample(model, tokenizer, train, seed=7), strict=True))
    rng = random.Random(0)
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    model.train()
    for _ in range(steps):
        x, y = chat.answer_batch(tokenizer, rng.sample(fitted, 32) + rng.sample(own, 32), model.config.block_size)
        loss = chat.answer_loss(model, x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    chat.save_checkpoint(model, out)


def test_a_checkpoint_fitted_to_the_intermediate_prompts_shows_a_heldout_gap_and_the_reference_none(
        tmp_path: Path, db_path: Path, chat_reference_run: RecordedRun) -> None:  # noqa: F811
    env = EnvironmentRegistry().get(ENV)
    build_environment(env, "ci", "local")
    built = assets_dir(env, "ci", build=False)
    assert built is not None
    prompts = {split: [row["prompt"] for row in read_jsonl(built / "protected" / files[0])]
               for split, files in score_module.SPLIT_FILES.items()}
    assert len(prompts["final"]) == PARAMS["n_final"] and not set(prompts["final"]) & set(prompts["intermediate"])
    for name in PARAMS["baselines"]:  # each baseline answered the final prompts too, in their order
        outputs = read_jsonl(built / "protected" / "final_reference_outputs" / f"{name}.jsonl")
        assert [row["prompt"] for row in outputs] == prompts["final"]

    checkpoint = tmp_path / "fitted.pt"
    fitted_checkpoint(built, checkpoint)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": f"cp {checkpoint} finetuned_model"},
                                                  {"score": {}}, {"submit": None}]}))
    chat_reference_run.copy_to(db_path)
    ran = run_cli("run", "--env", ENV, "--profile", "ci", "--agent", "replay",
                  "--agent-arg", f"script={script}", "--budget", "5m", "--backend", "local",
                  "--db", str(db_path), "--no-calibrate", timeout=1200)
    assert ran.returncode == 0, ran.stderr[-3000:]
    with sqlite3.connect(db_path) as connection:
        rows = connection.execute("select a.agent, s.kind, s.raw, s.message from score_events s join attempts a "
                                  "on a.id = s.attempt_id where s.kind in ('intermediate', 'heldout')").fetchall()
    raw = {(agent, kind): value for agent, kind, value, _ in rows}
    assert all(json.loads(message)["n_prompts"] == 48 for *_, message in rows), rows
    assert set(raw) == {(agent, kind) for agent in ("replay", "reference") for kind in ("intermediate", "heldout")}
    split = env.profile("ci").final_split
    assert split is not None
    anchors = env.profile("ci").anchors
    # fitted: above the reference on the prompts it was fitted to, below it on the others
    assert raw[("replay", "intermediate")] > max(raw[("reference", "intermediate")], anchors.reference), raw
    assert raw[("replay", "heldout")] < min(raw[("reference", "heldout")], split.anchors.reference), raw

    made = report(db_path, budgets="5m", at="5m", n_bootstrap=200)
    assert made is not None
    agents = {summary.agent: summary for summary in made.agents}
    tuned, reference = agents["replay"], agents["reference"]
    assert tuned.heldout_gap is not None and tuned.heldout_gap > split.margin, tuned
    assert (tuned.probing, tuned.heldout_n) == (1, 1)
    assert reference.heldout_gap is not None and abs(reference.heldout_gap) <= split.margin, reference
    assert (reference.probing, reference.heldout_n) == (0, 1)
