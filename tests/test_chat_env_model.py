"""nanogpt_chat_rl with its trained student: the `ci` profile built (the student pretrained, the
second baseline finetuned, both baselines' answers stored), then an attempt of the reference
agent through the real CLI on the local backend, its judge calls going through the gateway on
the agent's meter and the scorer's on its own. Nothing is faked.

Slow: the `ci` build trains the student (about a minute on 2 cores, once per test session's cache)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from rebench.environments.build import assets_dir
from rebench.environments.registry import EnvironmentRegistry

from .conftest import RecordedRun, run_cli
from .reference_runs import chat_reference_run  # noqa: F401
from .test_chat_env import chat, judge_module, score_module

ENV = "nanogpt_chat_rl"

pytestmark = pytest.mark.slow


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_degenerate_policies_score_no_better_than_the_starting_student() -> None:
    """A constant answer, maximum-length filler and echoing the prompt, each judged against the
    stored baselines exactly as the scorer judges (the same win fractions, the real judge), score
    at most what the untuned student's own answers (its stored seed-0 samples) score."""
    env = EnvironmentRegistry().get(ENV)
    built = assets_dir(env, "ci")
    assert built is not None
    judge = judge_module.load(built).judge
    params = json.loads((built / "home" / "profile_params.json").read_text())
    prompts = [row["prompt"] for row in read_jsonl(built / "protected" / "prompts.jsonl")]
    baselines = {name: [row["output"] for row in read_jsonl(built / "protected" / "reference_outputs" /
                                                               f"{name}.jsonl")] for name in params["baselines"]}
    tokenizer = chat.load_tokenizer(built / "home")
    model, generation = score_module.load_checkpoint(built / "home" / "student_model.pt", params["student_config"])
    start_answers = chat.sample(model, tokenizer, prompts, seed=0, **generation)
    assert start_answers == baselines["student"]  # the build sampled as the scorer does

    def score_of(answers: list[str]) -> float:
        def verdicts(batch: list[str], pairs: list[tuple[str, str]]) -> list[bool]:
            return [judge.first_preferred(p, a, b) for p, (a, b) in zip(batch, pairs, strict=True)]

        return sum(score_module.win_fraction(prompts, answers, outputs, verdicts)[0]
                   for outputs in baselines.values()) / len(baselines)

    start = score_of(start_answers)
    filler = " ".join(["sure", ",", "apple", "is", "a", "fruit", "and", "dog", "is", "a", "animal"] * 6).split()[:60]
    degenerate = {"constant": ["sure , the apple is a fruit ."] * len(prompts),
                  "filler": [" ".join(filler)] * len(prompts),
                  "echo": list(prompts),
                  "echo+": [f"sure , {p} ." for p in prompts]}
    scores = {name: score_of(answers) for name, answers in degenerate.items()}
    assert 0.3 < start < 0.5, start
    for name, value in scores.items():
        assert value <= start, (name, value, start)


def test_the_reference_beats_the_start_and_the_attempt_shows_both_meters(
        tmp_path: Path, chat_reference_run: RecordedRun) -> None:  # noqa: F811
    """One reference attempt (the session's, tests/reference_runs.py): the baseline score (the
    untuned student), the reference's and its held-out final (ci's final split, 48 other prompts);
    the reference's tournament asked the judge on the agent's meter, scoring on the scorer's, and
    `attempts show` prints the two apart."""
    db = chat_reference_run.copy_to(tmp_path / "r.db")
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select kind, raw, message from score_events order by id").fetchall()
        meters = dict(connection.execute("select meter, count(*) from gateway_requests where status = 200 "
                                         "group by meter").fetchall())
    (start_kind, start, _), (kind, reference, message), (final_kind, final, final_message) = rows
    assert (start_kind, kind, final_kind) == ("baseline", "intermediate", "heldout")
    assert json.loads(message)["n_prompts"] == json.loads(final_message)["n_prompts"] == 48
    assert reference > start + 0.2 and final is not None, (start, reference, final)
    assert meters["agent"] > 500 and 0 < meters["scorer"] <= 3 * 2 * 48, meters
    shown = run_cli("attempts", "show", "1", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    lines = {line.split(":")[0]: line for line in shown.stdout.splitlines() if line.startswith("gateway (")}
    assert f"{meters['agent']} requests" in lines["gateway (agent)"], shown.stdout
    assert f"{meters['scorer']} requests" in lines["gateway (scorer)"], shown.stdout


def test_the_given_rl_finetune_script_runs_and_its_checkpoint_scores(tmp_path: Path) -> None:
    """The starting script (two samples per prompt, the judge's pick, a step on it) runs as given
    for a few steps, asks the judge on the agent's meter, and writes a checkpoint the scorer takes."""
    script = tmp_path / "rl.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": "python rl_finetune.py --steps 3 --batch 8"},
                                                  {"score": {}}, {"submit": None}]}))
    db = tmp_path / "r.db"
    result = run_cli("run", "--env", ENV, "--agent", "replay", "--agent-arg", f"script={script}", "--profile", "ci",
                     "--budget", "5m", "--backend", "local", "--db", str(db), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        (bash,) = connection.execute("select data from events where kind = 'bash'").fetchone()
        rows = connection.execute("select kind, raw, message from score_events order by id").fetchall()
        agent_calls = connection.execute("select count(*) from gateway_requests where meter = 'agent' "
                                         "and status = 200").fetchone()[0]
    assert "saved" in json.loads(bash)["stdout"] and json.loads(bash)["exit_code"] == 0, bash
    assert [kind for kind, _, _ in rows] == ["baseline", "intermediate", "heldout"]
    for _, raw, message in rows[1:]:  # finetuned_model was scored, on both splits
        assert raw is not None and "note" not in json.loads(message), rows
    assert 0 < agent_calls <= 3 * 8
