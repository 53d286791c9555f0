"""The aide agent's tree search, review, restoring and limits, through the real SDK clients
against the fake model server and the runner's real AttemptContext (tests/scratch_context.py:
only the scorer is a test double there, a function reading the solution file). Whole attempts
on the kernel environment are in test_aide_campaign.py."""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from rebench.agents.aide import BEST_NOTE
from rebench.agents.aide.agent import create_agent
from rebench.agents.aide.reply import parse_reply
from rebench.agents.base import AgentConfig, EnvironmentInfo, LimitExceeded
from rebench.errors import RebenchError
from rebench.store.models import Pause
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_for, model_server, prices_file, provider_keys  # noqa: F401
from tests.scratch_context import ScratchContext

START = "VALUE = 9.0\n"


def value_scorer(ctx_box: list[ScratchContext], visible: bool = True) -> Any:
    """Scores solution.py by the VALUE it defines (lower is better); a file that does not run is invalid."""

    def score() -> dict[str, Any]:
        source = (Path(ctx_box[0].paths.solution) / "solution.py").read_text()
        scope: dict[str, Any] = {}
        try:
            exec(source, scope)
        except Exception as exc:  # any failure makes the solution invalid
            return {"valid": False, "message": {"error": repr(exc)}}
        shown: dict[str, Any] = {"valid": True, "message": {}}
        if visible:
            shown["score"] = float(scope["VALUE"])
        return shown

    return score


def make_ctx(tmp_path: Path, server: FakeModelServer, provider: str = "openai-compatible", *,
             visible: bool = True, final_score: str = "best", token_limit: int | None = None,
             budget_s: float = 300, **args: str) -> ScratchContext:
    config = AgentConfig(name="aide", args=args, token_limit=token_limit,
                         **model_for(provider, server))  # type: ignore[arg-type]
    box: list[ScratchContext] = []
    ctx = ScratchContext(tmp_path, config, budget_s=budget_s, scorer=value_scorer(box, visible),
                         instructions="Make VALUE in solution.py as small as you can.")
    box.append(ctx)
    ctx.environment = EnvironmentInfo(name="scratch", title="Scratch task", version="0", profile="tiny",
                                      direction="lower", score_visible=visible,
                                      final_score=final_score)  # type: ignore[arg-type]
    (Path(ctx.paths.solution) / "solution.py").write_text(START)
    return ctx


def review(is_bug: bool, summary: str, metric: float | None = None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"is_bug": is_bug, "summary": summary}
    if metric is not None:
        arguments["metric"] = metric
    return {"tool_calls": [call("submit_review", **arguments)]}


def solution(value: str, *, named: bool = True, run: str | None = None, plan: str = "A plan.") -> dict[str, Any]:
    head = "# file: solution.py\n" if named else ""
    text = f"{plan}\n\n```python\n{head}VALUE = {value}\n```\n"
    if run:
        text += f"\n```bash\n{run}\n```\n"
    return {"text": text}


def nodes(ctx: ScratchContext) -> list[dict[str, Any]]:
    return [data for kind, data in ctx.events if kind == "aide_node"]


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_a_broken_draft_is_debugged_then_improved_and_the_best_node_ends_in_place(
    provider: str, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path,
    tmp_path: Path,
) -> None:
    """The improvement scores worse than the node it improved, so the debugged node must be put back."""
    model_server.add(
        solution("(", run="python solution.py", plan="Draft: a constant."),
        review(True, "The file does not parse."),
        solution("3.0", named=False, run="python solution.py && echo ran-ok", plan="Close the parenthesis."),
        review(False, "Parses now; VALUE is 3."),
        solution("5.0", plan="Try 5."),
        review(False, "VALUE is 5, worse."),
    )
    ctx = make_ctx(tmp_path, model_server, provider, num_drafts="1", debug_prob="1", max_steps="3")
    asyncio.run(create_agent(ctx.config).run(ctx))
    tree = nodes(ctx)
    assert [(n["node"], n["parent"], n["step"], n["buggy"]) for n in tree] == [
        (1, None, "draft", True), (2, 1, "debug", False), (3, 2, "improve", False)]
    assert tree[0]["exit_code"] != 0 and tree[0]["score_valid"] is False and "SyntaxError" in tree[0]["output_tail"]
    assert tree[1]["exit_code"] == 0 and "ran-ok" in tree[1]["output_tail"] and tree[1]["metric"] == 3.0
    assert tree[2]["score"] == 5.0 and "-VALUE = 3.0\n+VALUE = 5.0" in tree[2]["diff"]
    assert tree[1]["summary"] == "Parses now; VALUE is 3." and tree[0]["plan"] == "Draft: a constant."
    assert (Path(ctx.paths.solution) / "solution.py").read_text() == "VALUE = 3.0\n"
    note = [d for k, d in ctx.events if k == "note" and d["message"] == BEST_NOTE]
    assert note[0]["data"]["node"] == 2 and ctx.submitted.is_set()
    scores = [d["feedback"].get("score") for k, d in ctx.events if k == "score"]
    assert scores == [None, 3.0, 5.0], "ranked by score: no score call after restoring"
    # the debug prompt carried the broken node's output, the improve prompt the node it improves
    debug_prompt, improve_prompt = model_server.requests[2].text, model_server.requests[4].text
    assert "SyntaxError" in debug_prompt and "The file does not parse." in debug_prompt
    assert "VALUE = 3.0" in improve_prompt and "metric 3" in improve_prompt
    assert model_server.requests[1].body.get("tools"), "the review is asked for as a tool call"
    attempt = ctx.attempt()
    assert len(ctx.usages) == 6 and attempt.input_tokens > 0 and attempt.output_tokens > 0 and attempt.cost_usd > 0


def test_hidden_score_ranks_by_the_reviews_metric_and_ends_with_a_score_call(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    model_server.add(
        solution("2.0", run="echo val_loss=2.0"), review(False, "val loss 2.0", 2.0),
        solution("4.0", run="echo val_loss=4.0"), review(False, "val loss 4.0", 4.0),
        solution("1.0", run="exit 3"), review(False, "claims fine", 0.5),
    )
    ctx = make_ctx(tmp_path, model_server, visible=False, num_drafts="3", max_steps="3")
    asyncio.run(create_agent(ctx.config).run(ctx))
    tree = nodes(ctx)
    assert [(n["metric"], n["buggy"], n["score"]) for n in tree] == [(2.0, False, None), (4.0, False, None),
                                                                    (0.5, True, None)]
    assert (Path(ctx.paths.solution) / "solution.py").read_text() == "VALUE = 2.0\n"
    kinds = ctx.kinds()
    assert kinds.count("score") == 4 and kinds[-2:] == ["score", "submit"], "the restored best node is scored last"
    assert "metric" in model_server.requests[1].text and "validation metric" in model_server.requests[1].text


def test_the_last_score_rule_ranks_by_own_metric_too(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    model_server.add(solution("7.0"), review(False, "seven", 7.0), solution("6.0"), review(False, "six", 8.0))
    ctx = make_ctx(tmp_path, model_server, final_score="last", num_drafts="2", max_steps="2")
    asyncio.run(create_agent(ctx.config).run(ctx))
    assert (Path(ctx.paths.solution) / "solution.py").read_text() == "VALUE = 7.0\n"
    scores = [d["feedback"].get("score") for k, d in ctx.events if k == "score"]
    assert scores == [7.0, 6.0, 7.0]


def test_a_token_limit_still_leaves_the_best_node_in_place(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    model_server.add(
        {**solution("2.0"), "usage": {"input_tokens": 10, "output_tokens": 10}},
        {**review(False, "two"), "usage": {"input_tokens": 10, "output_tokens": 10}},
        {**solution("8.0"), "usage": {"input_tokens": 10, "output_tokens": 10}},
        {**review(False, "eight"), "usage": {"input_tokens": 1000, "output_tokens": 10}},
    )
    ctx = make_ctx(tmp_path, model_server, token_limit=500, num_drafts="5")
    with pytest.raises(LimitExceeded):
        asyncio.run(create_agent(ctx.config).run(ctx))
    assert (Path(ctx.paths.solution) / "solution.py").read_text() == "VALUE = 2.0\n"


def test_a_reply_without_code_is_a_buggy_node_and_nothing_working_restores_the_start(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    model_server.add({"text": "I would think about it."}, solution("(", plan="Broken."), review(True, "broken"))
    ctx = make_ctx(tmp_path, model_server, num_drafts="2", max_steps="2")
    asyncio.run(create_agent(ctx.config).run(ctx))
    first, second = nodes(ctx)
    assert first["buggy"] and "no code block" in first["summary"] and first["files"] == []
    assert second["buggy"] and second["score_valid"] is False
    assert (Path(ctx.paths.solution) / "solution.py").read_text() == START
    assert len(model_server.requests) == 3, "a reply without code is not reviewed"


def test_reply_parsing() -> None:
    text = ("Plan first.\n\n```python\n# file: pkg/model.py\nx = 1\n```\n\n```\nprint('main')\n```\n"
            "```bash\npython train.py --fast\n```\n")
    reply = parse_reply(text, "solution.py")
    assert reply.plan == "Plan first." and reply.run_command == "python train.py --fast"
    assert reply.files == {"pkg/model.py": "x = 1\n", "solution.py": "print('main')\n"}
    assert parse_reply("```\n# file: ../escape.py\nx\n```", "s.py").problem is not None
    assert parse_reply("```\n# file: /abs.py\nx\n```", "s.py").files == {}


@pytest.mark.parametrize(("args", "expected"), [
    ({"num_drafts": "-1"}, "invalid --agent-arg num_drafts='-1' for aide"),
    ({"debug_prob": "2"}, "invalid --agent-arg debug_prob='2' for aide"),
    ({"rank_by": "luck"}, "invalid --agent-arg rank_by='luck' for aide"),
    ({"bash_timeout_s": "3"}, "unknown --agent-arg 'bash_timeout_s' for aide; allowed: api_key_env,"),
])
def test_bad_agent_args_are_one_line_errors(args: dict[str, str], expected: str) -> None:
    config = AgentConfig(name="aide", model="openai-compatible/x", base_url="http://127.0.0.1:9/v1", args=args)
    with pytest.raises(RebenchError) as error:
        create_agent(config)
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)


def test_provider_retries_pause_the_clock_as_for_the_modular_agent(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    model_server.add({"status": 429, "retry_after": 0.2}, solution("1.0"), {"status": 529}, review(False, "one"))
    ctx = make_ctx(tmp_path, model_server, "anthropic", max_steps="1", retry_base_s="0.1")
    asyncio.run(create_agent(ctx.config).run(ctx))
    assert ctx.kinds().count("provider-retry") == 2 and len(ctx.usages) == 2
    with ctx.store.session() as session:
        pauses = list(session.scalars(select(Pause)))
    assert [p.reason for p in pauses] == ["provider-retry", "provider-retry"]
    assert all(p.end_s is not None and p.end_s > p.start_s for p in pauses)
    assert nodes(ctx)[0]["metric"] == 1.0


def test_a_step_that_cannot_finish_before_the_end_is_not_started(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    """Steps take about 3 s (their run command sleeps); with 10 s of budget and 5 s kept back for
    restoring, a second step would end past what is left, so it is not started: the attempt
    never ends on a half-made node."""
    model_server.add(*[step for value in ("2.0", "1.0", "0.5")
                       for step in (solution(value, run="sleep 3"), review(False, value))])
    ctx = make_ctx(tmp_path, model_server, budget_s=10, num_drafts="5")
    asyncio.run(create_agent(ctx.config).run(ctx))
    assert [n["metric"] for n in nodes(ctx)] == [2.0] and len(model_server.requests) == 2
    assert ctx.submitted.is_set() and ctx.elapsed_s() < 10


TRAIN = "import sys\nopen('model.bin', 'wb').write(b'\\x00' + sys.argv[1].encode())\n"


def test_what_the_best_nodes_run_produced_is_put_back_with_it(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
) -> None:
    """Checkpoint-style environments: the submission is what the run command writes (model.bin), not
    the node's code. The second run overwrites the checkpoint with a worse one and leaves a stray file;
    putting node 1 back brings its checkpoint back and removes what node 2's run created."""
    box: list[ScratchContext] = []

    def checkpoint_score() -> dict[str, Any]:
        path = Path(box[0].paths.solution) / "model.bin"
        if not path.exists():
            return {"valid": False, "message": {"error": "no model.bin"}}
        return {"valid": True, "score": float(path.read_bytes()[1:]), "message": {}}

    def train(value: str, extra: str = "") -> dict[str, Any]:
        code = f"```\n# file: train.py\n{TRAIN}```"
        return {"text": f"Train.\n\n{code}\n\n```bash\npython train.py {value}{extra}\n```\n"}

    model_server.add(train("2.0"), review(False, "two"), train("6.0", " && echo x > stray.bin"), review(False, "six"))
    ctx = make_ctx(tmp_path, model_server, num_drafts="2", max_steps="2")
    box.append(ctx)
    ctx._scorer = checkpoint_score
    asyncio.run(create_agent(ctx.config).run(ctx))
    assert [n["metric"] for n in nodes(ctx)] == [2.0, 6.0]
    folder = Path(ctx.paths.solution)
    assert (folder / "model.bin").read_bytes() == b"\x002.0"
    assert not (folder / "stray.bin").exists() and (folder / "solution.py").read_text() == START
    assert checkpoint_score()["score"] == 2.0
