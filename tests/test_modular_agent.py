"""The modular agent's loop, tools, time notes and context trimming, through real SDK clients.

These use ScratchContext (tests/scratch_context.py) in place of the runner so each
behaviour is tested on its own; whole attempts through the runner are in
test_modular_runner.py.
"""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig, LimitExceeded
from rebench.agents.modular.agent import create_agent
from rebench.agents.modular.history import TRIMMED_NOTICE
from rebench.agents.modular.prompts import NO_TOOL_CALL, time_note
from rebench.clock import AttemptClock
from rebench.errors import RebenchError
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_for, model_server, prices_file, provider_keys  # noqa: F401
from tests.scratch_context import ScratchContext


def run_agent(
    provider: str, server: FakeModelServer, tmp_path: Path, *, budget_s: float = 300, **args: str
) -> ScratchContext:
    config = AgentConfig(name="modular", args=args, **model_for(provider, server))  # type: ignore[arg-type]
    ctx = ScratchContext(tmp_path, config, budget_s=budget_s, scorer=lambda: {"score": 0.5, "valid": True})
    asyncio.run(create_agent(config).run(ctx))
    return ctx


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_tools_run_in_order_and_results_reach_the_model(
    provider: str,
    model_server: FakeModelServer,
    provider_keys: dict[str, str],
    prices_file: Path,
    tmp_path: Path,
) -> None:
    model_server.add(
        {
            "text": "Writing a file.",
            "tool_calls": [call("bash", command="echo fast > note.txt; echo wrote")],
        },
        {"tool_calls": [call("python", code="print(open('note.txt').read().upper())")]},
        {"tool_calls": [call("score"), call("score_log")]},
        {"text": "Done.", "tool_calls": [call("submit", answer="fast")]},
    )
    ctx = run_agent(provider, model_server, tmp_path)
    assert ctx.submitted.is_set() and ctx.answer == "fast"
    assert (Path(ctx.paths.solution) / "note.txt").read_text() == "fast\n"
    results = [data for kind, data in ctx.events if kind == "tool_result"]
    assert [r["tool"] for r in results] == ["bash", "python", "score", "score_log", "submit"]
    assert results[0]["output"] == "exit code: 0\nstdout:\nwrote\n"
    assert "FAST" in results[1]["output"] and '"score": 0.5' in results[2]["output"]
    assert len(model_server.requests) == 4 and len(ctx.usages) == 4
    first, last = model_server.requests[0], model_server.requests[-1]
    assert "Make the tests pass." in first.text and "[Time: " in first.text
    assert "FAST" in last.text and last.text.count("[Time: ") == 4
    assert ctx.events[-1][0] == "tool_result"


def test_long_output_is_cut_and_saved_whole(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        {"tool_calls": [call("python", code="print('A' * 3000 + 'MIDDLE' + 'Z' * 3000)")]},
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path, output_limit_chars="1000")
    shown = next(d["output"] for k, d in ctx.events if k == "tool_result")
    saved = Path(ctx.paths.home) / "tool_outputs" / "output_1.txt"
    whole = saved.read_text()
    assert "MIDDLE" not in shown and shown.startswith("exit code: 0") and shown.rstrip().endswith("Z" * 100)
    assert f"the first and last 500 are shown; this tool result ({len(whole)} characters, as captured) " \
        f"is saved in {saved}" in shown
    assert "MIDDLE" in whole and len(whole) > 6000
    assert str(saved) in model_server.requests[-1].text


def test_a_command_past_the_capture_limit_says_what_was_kept(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    """The sandbox keeps only the first and last 500 kB of a stream: the tool result says so
    (it used to claim the full output was saved)."""
    model_server.add(
        {"tool_calls": [call("python", code="print('H' * 600_000 + 'LOST' + 'T' * 600_000)")]},
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path)
    shown = next(d["output"] for k, d in ctx.events if k == "tool_result")
    assert "only the first and last 500000 bytes of that stream were kept" in shown
    assert "full output" not in shown
    whole = (Path(ctx.paths.home) / "tool_outputs" / "output_1.txt").read_text()
    assert "LOST" not in whole and "bytes dropped" in whole


def test_a_timed_out_command_returns_what_it_printed(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        {"tool_calls": [call("bash", command="echo before; echo warn >&2; sleep 30; echo later", timeout_s=1)]},
        {"tool_calls": [call("bash", command="sleep 100000 & echo started", timeout_s=20)]},
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path)
    timed_out, background = [d["output"] for k, d in ctx.events if k == "tool_result"][:2]
    assert timed_out.startswith("timed out after 1 s") and "stdout:\nbefore\n" in timed_out
    assert "stderr:\nwarn\n" in timed_out and "later" not in timed_out
    assert background == "exit code: 0\nstdout:\nstarted\n"
    assert ctx.clock.working_seconds() < 10
    ctx.sandbox.kill_all()


def test_command_timeouts_default_cap_and_kill(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        {"tool_calls": [call("bash", command="sleep 5", timeout_s=0.5)]},
        {"tool_calls": [call("bash", command="true", timeout_s=99999)]},
        {"tool_calls": [call("bash", command="true", timeout_s=None)]},
        {"tool_calls": [call("bash", command="true", timeout_s="soon")]},
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path, bash_timeout_s="7", bash_timeout_max_s="60")
    bash = [d for k, d in ctx.events if k == "bash"]
    assert bash[0]["timeout"] == 0.5 and bash[0]["exit_code"] is None
    assert bash[1]["timeout"] == 60 and bash[2]["timeout"] == 7 and len(bash) == 3
    outputs = [d["output"] for k, d in ctx.events if k == "tool_result"]
    assert outputs[0].startswith("timed out") and "timeout_s must be a number" in outputs[3]


def test_bad_calls_are_reported_back_not_fatal(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        {"tool_calls": [call("browse", url="x")]},
        {"tool_calls": [{"name": "bash", "raw_arguments": "{not json"}]},
        {"tool_calls": [call("bash", command="")]},
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path)
    outputs = [d["output"] for k, d in ctx.events if k == "tool_result"]
    assert "unknown tool 'browse'" in outputs[0]
    assert "not valid JSON" in outputs[1]
    assert "non-empty string" in outputs[2]
    assert outputs[3] == "submitted"


def test_keeps_nudging_after_replies_without_tool_calls(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    """METR's modular agent never gives up on its own: it nudges until the model acts."""
    model_server.add(
        {"text": "thinking"},
        {"text": "still thinking", "truncated": True},
        *[{"text": f"more thinking {n}"} for n in range(4)],
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("anthropic", model_server, tmp_path)
    assert ctx.submitted.is_set() and ctx.answer is None and "agent_gave_up" not in ctx.kinds()
    assert len(model_server.requests) == 7
    assert NO_TOOL_CALL in model_server.requests[1].text
    assert "cut off at the output limit (8192 tokens)" in model_server.requests[2].text


def test_stops_asking_when_the_budget_is_spent(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(*[{"text": "hmm", "delay_s": 0.4}] * 20)
    ctx = run_agent("openai-compatible", model_server, tmp_path, budget_s=1)
    assert ctx.kinds()[-1] == "budget_spent" and not ctx.submitted.is_set()
    assert 2 <= len(model_server.requests) <= 5


def test_old_tool_outputs_give_way_in_a_small_context(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        *[{"tool_calls": [call("python", code=f"print('{n}' * 3000)")]} for n in range(1, 6)],
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent(
        "anthropic",
        model_server,
        tmp_path,
        context_window="4000",
        max_output_tokens="500",
        output_limit_chars="4000",
    )
    assert "context_trimmed" in ctx.kinds() and ctx.submitted.is_set() and ctx.answer is None
    last = model_server.requests[-1].text
    assert TRIMMED_NOTICE in last and "Make the tests pass." in last
    assert "5" * 3000 in last and "1" * 3000 not in last
    assert len(last) < 4000 * 0.8 * 3


def test_recovers_when_the_server_says_the_prompt_is_too_long(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.max_prompt_chars = 9000
    model_server.add(
        *[{"tool_calls": [call("python", code=f"print('{n}' * 3000)")]} for n in range(1, 5)],
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent("openai-compatible", model_server, tmp_path, context_window="20000", output_limit_chars="4000")
    assert ctx.submitted.is_set() and ctx.answer is None
    errors = [d for k, d in ctx.events if k == "model-error"]
    assert errors and all(e["context_overflow"] for e in errors)
    assert TRIMMED_NOTICE in model_server.requests[-1].text


def test_a_reduced_context_target_is_kept_for_later_turns(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    """After the provider reports one overflow, later turns trim to the reduced target
    first: exactly one request fails, however many turns follow."""
    model_server.max_prompt_chars = 12_000
    model_server.add(
        *[{"tool_calls": [call("python", code=f"print('{n}' * 3000)")]} for n in range(1, 8)],
        {"tool_calls": [call("submit")]},
    )
    ctx = run_agent(
        "openai-compatible", model_server, tmp_path,
        context_window="10000", max_output_tokens="1000", output_limit_chars="4000",
    )  # fmt: skip
    assert ctx.submitted.is_set() and ctx.answer is None
    failed = len(model_server.requests) - 8
    assert failed == 1 and len([k for k in ctx.kinds() if k == "model-error"]) == 1
    assert [k for k in ctx.kinds() if k == "context_target_reduced"] == ["context_target_reduced"]


def test_token_limit_ends_the_run(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path
) -> None:
    model_server.add(
        *[{"tool_calls": [call("bash", command="true")], "usage": {"input_tokens": 400, "output_tokens": 10}}] * 5
    )
    config = AgentConfig(name="modular", token_limit=1000, **model_for("openai", model_server))  # type: ignore[arg-type]
    ctx = ScratchContext(tmp_path, config)
    with pytest.raises(LimitExceeded) as err:
        asyncio.run(create_agent(config).run(ctx))
    assert err.value.which == "tokens" and len(ctx.usages) == 3
    assert ctx.attempt().input_tokens + ctx.attempt().output_tokens == 1230
    assert ctx.kinds()[-1] == "limit" and ctx.limit_reason == "tokens"
    assert "Tokens: 820 of 1000 used (82%)" in model_server.requests[-1].text
    assert "More than 3/4 of your budget" in model_server.requests[-1].text


def test_time_notes_nudge_at_three_quarters_and_nine_tenths(tmp_path: Path) -> None:
    now = [0.0]
    ctx = ScratchContext(tmp_path, AgentConfig(name="modular"), budget_s=1000)
    ctx.clock = AttemptClock(now=lambda: now[0])
    ctx.clock.start()
    assert time_note(ctx) == "[Time: 0s of 16m40s used (0%), 16m40s remaining.]"
    now[0] = 500
    assert "50%" in time_note(ctx) and "wrapping up" not in time_note(ctx)
    now[0] = 760
    assert "3/4" in time_note(ctx) and "submit now" not in time_note(ctx)
    now[0] = 905
    assert "9/10" in time_note(ctx) and "1m35s remaining" in time_note(ctx)


def test_token_and_cost_budgets_are_reported_and_nudge_too(tmp_path: Path) -> None:
    config = AgentConfig(name="modular", token_limit=10_000, cost_limit_usd=2.0)
    ctx = ScratchContext(tmp_path, config, budget_s=1000)
    note = time_note(ctx, tokens_used=2_000, cost_used_usd=0.5)
    assert "Tokens: 2000 of 10000 used (20%)" in note and "Cost: $0.50 of $2.00 used (25%)" in note
    assert "wrapping up" not in note
    assert "3/4" in time_note(ctx, tokens_used=8_000, cost_used_usd=0.5)
    assert "9/10" in time_note(ctx, tokens_used=0, cost_used_usd=1.9)


def test_bad_agent_args_and_missing_model_are_one_line_errors(provider_keys: dict[str, str]) -> None:
    with pytest.raises(RebenchError, match="unknown --agent-arg 'temprature'"):
        create_agent(AgentConfig(name="modular", model="openai/gpt-5", args={"temprature": "0"}))
    with pytest.raises(RebenchError, match="bash_timeout_s='soon'"):
        create_agent(AgentConfig(name="modular", model="openai/gpt-5", args={"bash_timeout_s": "soon"}))
    with pytest.raises(RebenchError, match="needs --model"):
        create_agent(AgentConfig(name="modular"))
