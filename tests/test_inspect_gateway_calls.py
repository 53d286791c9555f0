"""`rebench export inspect` on installed agents' calls: the request and answer bodies the gateway stored
become Inspect model events with their input messages, tools and output.

Real parts: the installed agents' gateway (rebench.gateway.agent_meter) in front of the fake model server
on 127.0.0.1, the real `anthropic` SDK streaming a Messages call with a tool use and the real `openai`
SDK making Responses calls (one streamed, with a function call), the runner's recorder writing the
`model_call` events into a real SQLite database (tests/scratch_context.py), the real CLI exporting, and
Inspect's own reader reading the log back.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from inspect_ai.log import EvalSample, read_eval_log

from rebench.agents.base import AgentConfig
from rebench.gateway.agent_meter import AgentGateway, agent_gateway_config
from tests.conftest import run_main
from tests.fake_model_server import FakeModelServer
from tests.scratch_context import ScratchContext

KEY = "sk-provider-export-test"
INSTRUCTIONS = "Make solution.py faster; run `task score` to see how you do."
BASH = {"name": "Bash", "description": "Run a shell command", "input_schema": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
EXEC = {"type": "function", "name": "exec_command", "description": "Run a command", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}


def _uds(gateway: AgentGateway) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=gateway.socket_path))


def start_attempt(root: Path, agent: str, model: str, base_url: str) -> ScratchContext:
    ctx = ScratchContext(root, AgentConfig(name=agent, model=model, base_url=base_url), instructions=INSTRUCTIONS)
    ctx.recorder.event("start", instructions=INSTRUCTIONS, agent=agent, model=model, budget_s=300.0,
                       backend="docker")
    return ctx


def body_folder(ctx: ScratchContext) -> Path:
    """Where the runner puts an installed agent's body files: beside the attempt's snapshot."""
    return ctx.store.snapshots_dir / f"attempt-{ctx.recorder.attempt_id}-agent" / "model-calls"


async def _through(ctx: ScratchContext, talk: Any) -> None:
    gateway = AgentGateway(agent_gateway_config(ctx.config, 4096), body_folder(ctx))
    await gateway.start(ctx)
    try:
        await talk(gateway)
    finally:
        await gateway.close()


def claude_attempt(root: Path, monkeypatch: pytest.MonkeyPatch) -> ScratchContext:
    """Two streamed Messages calls: a tool use, then (given its result) a final message."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    steps: list[dict[str, Any]] = [{"tool_calls": [{"name": "Bash", "arguments": {"command": "cat notes.txt"}}],
              "usage": {"input_tokens": 900, "output_tokens": 30}},
             {"text": "The notes say to unroll the loop.", "usage": {"input_tokens": 950, "output_tokens": 12}}]
    with FakeModelServer(steps, require_key=KEY) as server:
        ctx = start_attempt(root, "claude-code", "anthropic/claude-test-model", server.url)

        async def talk(gateway: AgentGateway) -> None:
            client: Any = anthropic.AsyncAnthropic(api_key=gateway.token, base_url="http://gateway", max_retries=0,
                                              http_client=_uds(gateway))
            messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": INSTRUCTIONS}]}]
            system = [{"type": "text", "text": "You are a coding agent."}]
            for _ in range(2):
                async with client.messages.stream(model="claude-test-model", max_tokens=512, system=system,
                                                  tools=[BASH], messages=messages) as stream:
                    reply = await stream.get_final_message()
                messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                                                  for b in reply.content]})
                uses = [b for b in reply.content if b.type == "tool_use"]
                if uses:
                    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                                  "content": "notes: unroll the loop"}]})

        asyncio.run(_through(ctx, talk))
    return ctx


def codex_attempt(root: Path, monkeypatch: pytest.MonkeyPatch) -> ScratchContext:
    """Two Responses calls: a streamed one with a function call, then (given its output) a whole answer."""
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", KEY)
    steps: list[dict[str, Any]] = [{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls -la"}}],
              "usage": {"input_tokens": 700, "output_tokens": 20}},
             {"text": "solution.py is the only file.", "usage": {"input_tokens": 760, "output_tokens": 9}}]
    with FakeModelServer(steps, require_key=KEY) as server:
        ctx = start_attempt(root, "codex", "openai-compatible/gpt-test-model", server.openai_url)

        async def talk(gateway: AgentGateway) -> None:
            client: Any = openai.AsyncOpenAI(api_key=gateway.token, base_url="http://gateway/v1", max_retries=0,
                                        http_client=_uds(gateway))
            items: list[Any] = [{"type": "message", "role": "user",
                                 "content": [{"type": "input_text", "text": INSTRUCTIONS}]}]
            stream = await client.responses.create(model="gpt-test-model", instructions="You are Codex.",
                                                   input=items, tools=[EXEC], stream=True)
            (completed,) = [e async for e in stream if e.type == "response.completed"]
            final = completed.response
            call = next(item for item in final.output if item.type == "function_call")
            items += [call.model_dump(exclude_none=True),
                      {"type": "function_call_output", "call_id": call.call_id, "output": "solution.py"}]
            await client.responses.create(model="gpt-test-model", instructions="You are Codex.", input=items,
                                          tools=[EXEC])

        asyncio.run(_through(ctx, talk))
    return ctx


def export(db: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[int, EvalSample]:
    """`rebench export inspect`, each log read back by Inspect: the samples by attempt id."""
    code, stdout, stderr = run_main(["export", "inspect", "--db", str(db), "--out", str(out), "--json"], capsys)
    assert code == 0, stderr
    samples: dict[int, EvalSample] = {}
    for log in json.loads(stdout)["logs"]:
        for sample in read_eval_log(log["path"], resolve_attachments=True).samples or []:
            samples[int(sample.id)] = sample
    return samples


def model_events(sample: EvalSample) -> list[Any]:
    return [event for event in sample.events if event.event == "model"]


def test_installed_agents_calls_export_with_their_messages_tools_and_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    claude = claude_attempt(tmp_path, monkeypatch)
    codex = codex_attempt(tmp_path, monkeypatch)  # the same database: a second attempt
    for ctx in (claude, codex):
        ctx.recorder.flush()
    samples = export(claude.store.path, tmp_path / "logs", capsys)

    first, second = model_events(samples[claude.recorder.attempt_id])
    assert [m.role for m in first.input] == ["system", "user"]
    assert first.input[0].text == "You are a coding agent." and first.input[1].text == INSTRUCTIONS
    assert [t.name for t in first.tools] == ["Bash"] and "command" in first.tools[0].parameters.properties
    assert first.config.max_tokens == 512
    (use,) = first.output.message.tool_calls or []
    assert (use.function, use.arguments) == ("Bash", {"command": "cat notes.txt"})
    assert first.output.stop_reason == "tool_calls"
    assert (first.output.usage.input_tokens, first.output.usage.output_tokens) == (900, 30)
    assert [m.role for m in second.input] == ["system", "user", "assistant", "tool"]
    assert second.input[3].tool_call_id == use.id and second.input[3].text == "notes: unroll the loop"
    assert second.input[1] is first.input[1]  # one object per message, not one per call
    assert second.output.completion == "The notes say to unroll the loop."
    assert first.metadata["request"] == second.metadata["request"] == "rebuilt from the gateway's body file"

    first, second = model_events(samples[codex.recorder.attempt_id])
    assert [(m.role, m.text) for m in first.input] == [("system", "You are Codex."), ("user", INSTRUCTIONS)]
    assert [t.name for t in first.tools] == ["exec_command"]
    (call,) = first.output.message.tool_calls or []
    assert (call.function, call.arguments) == ("exec_command", {"cmd": "ls -la"})
    assert [m.role for m in second.input] == ["system", "user", "assistant", "tool"]
    assert second.input[2].tool_calls and second.input[2].tool_calls[0].id == call.id
    assert second.input[3].text == "solution.py"
    assert second.output.completion == "solution.py is the only file."
    sample = samples[codex.recorder.attempt_id]
    assert sample.output.completion == "solution.py is the only file."
    assert [m.role for m in sample.messages] == ["system", "user", "assistant", "tool", "assistant"]


def test_a_missing_or_broken_body_file_gives_the_call_with_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ctx = claude_attempt(tmp_path, monkeypatch)
    ctx.recorder.flush()
    folder = body_folder(ctx)
    (folder / "0001.json").unlink()
    (folder / "0002.json").write_text('{"request": {"messages": [')
    first, second = model_events(export(ctx.store.path, tmp_path / "logs", capsys)[ctx.recorder.attempt_id])
    assert first.input == [] and "is missing" in first.metadata["request"]
    assert second.input == [] and "cannot be read as JSON" in second.metadata["request"]
    # the reply the gateway read from the stream is still there
    assert first.output.message.tool_calls and first.output.message.tool_calls[0].function == "Bash"
    assert second.output.completion == "The notes say to unroll the loop."


def test_a_chat_completions_stream_is_folded_into_the_whole_completion() -> None:
    """The third API the gateway serves, from the fake server's own stream of a reply with text and a tool call."""
    from inspect_ai.model import model_output_from_openai

    from rebench.export.streamed import whole_answer
    from tests.fake_model_streams import encode, openai_events

    step = {"text": "Looking.", "tool_calls": [{"id": "call_7", "name": "bash", "arguments": {"command": "ls"}}]}
    events = openai_events(step, {"model": "gpt-x", "stream_options": {"include_usage": True}}, 1, (40, 9, 0),
                           "tool_calls")
    whole = whole_answer("chat", b"".join(encode(name, data) for name, data in events).decode())
    assert whole is not None
    output = asyncio.run(model_output_from_openai(whole))
    assert output.completion == "Looking." and output.stop_reason == "tool_calls"
    (call,) = output.message.tool_calls or []
    assert (call.id, call.function, call.arguments) == ("call_7", "bash", {"command": "ls"})
    assert output.usage is not None and (output.usage.input_tokens, output.usage.output_tokens) == (40, 9)
