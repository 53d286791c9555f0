"""The real `claude` and `codex` programs, installed from npm into the attempt's image by rebench's own
build, run an attempt on triton_cumsum (tiny, docker) against the fake model server on 127.0.0.1 with
real SSE streaming. The script reads the instructions, edits solution.py, runs `task score` and looks
for the provider key from inside, then ends with a message (no `task submit`: the attempt ends
unsubmitted).

Checked: the score event, the edit in the snapshot, every model call a `model_call` event with tokens,
model-wait time recorded, the agent's own session files copied out, and the provider key found nowhere
in the sandbox (files the agent can read, its processes' environments), the snapshot or the agent's
files beside it, while the fake provider did receive it (the harness's gateway sent it upstream).
The attempt is then exported for Inspect: every call is rebuilt from the gateway's body files, the
agent's first working request carrying the task's instructions.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.atif_campaigns import calls as atif_calls
from tests.atif_campaigns import export as export_atif
from tests.conftest import run_cli
from tests.fake_model_server import FakeModelServer
from tests.harbor_validator import harbor_python, validate
from tests.test_inspect_gateway_calls import export

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KEY = "sk-provider-KEEPOUT-4f9d2c"
SPLIT_KEY = '"sk-provider-KEEP""OUT-4f9d2c"'
"""The key as the shell sees it in the script's commands, so the script itself never holds it."""
MARKER = "# edited by the installed agent"
SCAN = ("{ grep -rIl -s " + SPLIT_KEY + " /home /tmp /dev/shm /run /etc /opt/rebench /var 2>/dev/null; "
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -l -s -a " + SPLIT_KEY
        + " $f; done; env | grep -c " + SPLIT_KEY + "; } > keyscan.txt; true")


def _side_call(api: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """Requests without tools (titles, probes) are answered off the script."""
    return {"text": "ok"} if not body.get("tools") else None


def _claude_steps() -> list[dict[str, Any]]:
    def bash(command: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": "Bash", "arguments": {"command": command, "description": "step"}}],
                "usage": {"input_tokens": 1200, "output_tokens": 40}}

    return [bash("head -c 2000 ~/.rebench/instructions.md"),
            bash(f"echo '{MARKER}' >> solution.py"),
            bash("task score"),
            bash(SCAN),
            {"text": "Done: scored once.", "usage": {"input_tokens": 1500, "output_tokens": 10}}]


def _codex_steps() -> list[dict[str, Any]]:
    def shell(command: str, **more: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command, **more}}],
                "usage": {"input_tokens": 1200, "output_tokens": 40}}

    return [shell("head -c 2000 ~/.rebench/instructions.md"),
            shell(f"echo '{MARKER}' >> solution.py"),
            shell("task score"),
            # Codex hands a command still running after `yield_time_ms` (10 s by default) back as a session
            # and ends the attempt with it unfinished: a scan slowed by a busy machine wrote nothing
            shell(SCAN, yield_time_ms=30_000),
            {"text": "Done: scored once.", "usage": {"input_tokens": 1500, "output_tokens": 10}}]


def _run(agent: str, model: str, server: FakeModelServer, db: Path, base_url: str) -> Any:
    return run_cli("run", "--env", "triton_cumsum", "--agent", agent, "--model", model, "--base-url", base_url,
                   "--profile", "tiny", "--budget", "10m", "-k", "1", "--backend", "docker", "--db", str(db),
                   # no anchors measured and no re-scoring: the agent's run is what is under test
                   "--final-rule", "best", "--no-calibrate",
                   env={"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": KEY, "OPENAI_COMPATIBLE_API_KEY": KEY},
                   timeout=2400)


def _check_attempt(db: Path, server: FakeModelServer, agent: str | None = None) -> None:
    """The attempt (of `agent`, when the database holds several) did what its script says."""
    with sqlite3.connect(db) as connection:
        (attempt_id, status, submitted, snapshot, wait), = connection.execute(
            "select id, status, submitted, snapshot_path, model_wait_s from attempts where ? is null or agent = ?",
            (agent, agent)).fetchall()
        scores = connection.execute("select kind, raw from score_events where attempt_id = ?",
                                    (attempt_id,)).fetchall()
        calls = [json.loads(data) for (data,) in connection.execute(
            "select data from events where attempt_id = ? and kind = 'model_call' order by seq", (attempt_id,))]
        notes = [json.loads(data) for (data,) in connection.execute(
            "select data from events where attempt_id = ? and kind = 'note'", (attempt_id,))]
    assert status == "done" and not submitted, (status, submitted)
    assert any(kind == "intermediate" for kind, _ in scores), scores
    solution = (Path(snapshot) / "solution.py").read_text()
    assert MARKER in solution
    tooled = [c for c in calls if c["tool_calls"]]
    assert len(tooled) >= 4, calls
    assert all(c["input_tokens"] > 0 and c["output_tokens"] > 0 for c in calls), calls
    assert all(Path(c["extra"]["body_file"]).is_file() for c in calls)
    assert wait > 0
    sessions = [n for n in notes if "agent_session_files" in n.get("data", {})]
    assert sessions and sessions[0]["data"]["agent_session_files"], notes
    scan = (Path(snapshot) / "keyscan.txt").read_text()
    assert scan.strip() == "0", scan  # no file, no process environment, and `env` has no line with it
    assert any(KEY in (r.headers.get("x-api-key", "") + r.headers.get("authorization", ""))
               for r in server.requests)
    base = Path(snapshot).parent if Path(snapshot).name == "final" else Path(snapshot)  # rescore_best: final/
    agent_dir = base.with_name(base.name + "-agent")
    assert (agent_dir / "model-calls").is_dir() and sessions[0]["data"]["agent_session_files"][0].startswith(
        str(agent_dir))
    for folder in (base, agent_dir):
        for path in folder.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path


def _check_export(db: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`rebench export inspect` rebuilds every call from the gateway's body files with Inspect's converters:
    the agent's first working request (the one offering tools) carries the task's instructions."""
    (sample,) = export(db, out, capsys).values()
    with sqlite3.connect(db) as connection:
        (calls,), = connection.execute("select count(*) from events where kind = 'model_call'").fetchall()
    events = [event for event in sample.events if event.event == "model"]
    assert len(events) == calls
    assert all(event.metadata["request"] == "rebuilt from the gateway's body file" for event in events), [
        event.metadata["request"] for event in events]
    first = next(event for event in events if event.tools)
    opening = str(sample.input)[:200]
    assert any(message.role == "user" and opening in message.text for message in first.input), first.input
    assert any(event.output.message.tool_calls for event in events)
    # ATIF: Harbor's validator accepts the trajectory; each model call is an agent step, and the CLI's
    # tool calls have their results (read from the next request's body file)
    (trajectory,) = export_atif(db, out.with_name(out.name + "-atif"), capsys).values()
    accepted, said = validate(harbor_python(), Path(trajectory["path"]))
    assert accepted, said
    agent = [s for s in trajectory["file"]["steps"] if s["source"] == "agent" and s.get("llm_call_count") == 1]
    assert len(agent) == calls
    answered = [results for _, _, results in atif_calls(trajectory)]
    assert answered and sum(1 for r in answered if r) >= len(answered) - 1, answered
    assert any(opening in s["message"] for s in trajectory["file"]["steps"] if s["source"] == "user")


def test_claude_code_runs_an_attempt_through_the_gateway(tmp_path: Path, db_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with FakeModelServer(_claude_steps(), require_key=KEY, aside=_side_call) as server:
        result = _run("claude-code", "anthropic/claude-test-model", server, db_path, server.url)
        assert result.returncode == 0, result.stdout + result.stderr
        _check_attempt(db_path, server)
        _check_export(db_path, tmp_path / "logs", capsys)
        shown = run_cli("attempts", "show", "1", "--db", str(db_path))
        flat = re.sub(r"[\s│]+", " ", shown.stdout)  # the events table's cells, unwrapped
        assert flat.count("tool calls: Bash(") >= 4, shown.stdout
        assert flat.index("task score") < flat.rindex("said: Done: scored once."), shown.stdout


def test_codex_runs_an_attempt_through_the_gateway_on_an_anthropic_upstream(
        tmp_path: Path, db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Across providers: Codex speaks OpenAI Responses, the upstream Anthropic Messages; the gateway
    translates each request, and each streamed answer back, tool calls included."""
    with FakeModelServer(_codex_steps(), require_key=KEY, aside=_side_call) as server:
        result = _run("codex", "anthropic/claude-test-model", server, db_path, server.url)
        assert result.returncode == 0, result.stdout + result.stderr
        assert {r.api for r in server.requests} == {"anthropic"}
        _check_attempt(db_path, server)
        _check_export(db_path, tmp_path / "logs", capsys)


def _by_agent(scripts: dict[str, list[dict[str, Any]]]) -> Any:
    """Answers each request from the script of the agent whose tools it offers (Claude Code's `Bash`,
    Codex's `exec_command`), so two agents can share one server in any order."""
    tools = {"claude-code": "Bash", "codex": "exec_command"}

    def answer(api: str, body: dict[str, Any]) -> dict[str, Any] | None:
        offered = {tool.get("name") or tool.get("function", {}).get("name") for tool in body.get("tools") or []}
        for agent, tool in tools.items():
            if tool in offered:
                return scripts[agent].pop(0) if scripts[agent] else {"text": "(script exhausted)"}
        return {"text": "ok"}

    return answer


def test_one_campaign_runs_claude_code_and_codex_on_an_openai_compatible_upstream(db_path: Path) -> None:
    """`--agent claude-code,codex` is one campaign with an attempt of each; Claude Code's Messages requests
    are translated to the upstream's Chat Completions (and its streams back), Codex's Responses pass on."""
    scripts = {"claude-code": _claude_steps(), "codex": _codex_steps()}
    with FakeModelServer([], require_key=KEY, aside=_by_agent(scripts)) as server:
        result = _run("claude-code,codex", "openai-compatible/gpt-test-model", server, db_path,
                      server.openai_url)
        assert result.returncode == 0, result.stdout + result.stderr
        assert scripts == {"claude-code": [], "codex": []}  # each agent went through its whole episode
        assert {r.api for r in server.requests} <= {"openai", "responses"}
        for agent in scripts:
            _check_attempt(db_path, server, agent)
    with sqlite3.connect(db_path) as connection:
        assert len({c for (c,) in connection.execute("select campaign_id from attempts")}) == 1
    report = run_cli("report", "--json", "--db", str(db_path))
    assert report.returncode == 0, report.stderr
    assert {row["agent"] for row in json.loads(report.stdout)} == {
        "claude-code/openai-compatible/gpt-test-model", "codex/openai-compatible/gpt-test-model"}, report.stdout


SLEEPER = """
description = "edits the solution, then works past its budget"
api = "anthropic"
command = "echo '# the sleeper was here' >> solution.py; sleep 100000"

[install]
"""


def test_an_installed_agent_still_running_at_the_budget_end_is_killed_and_snapshotted(
        tmp_path: Path, db_path: Path) -> None:
    declarations = tmp_path / "agents"
    declarations.mkdir()
    (declarations / "sleeper.toml").write_text(SLEEPER)
    # The harness's own temporary folder (short: the gateway's socket is in it), so that the check below
    # sees only this campaign's gateway folder, not those of installed-agent tests running beside it.
    temp = Path(tempfile.mkdtemp(prefix="rbt-", dir="/tmp"))
    with FakeModelServer([], require_key=KEY) as server:
        result = run_cli("run", "--env", "triton_cumsum", "--agent", "sleeper", "--model", "anthropic/test-model",
                         "--base-url", server.url, "--profile", "tiny", "--budget", "20s", "--backend", "docker",
                         "--final-rule", "best", "--no-calibrate",
                         "--db", str(db_path),
                         env={"ANTHROPIC_API_KEY": KEY, "REBENCH_AGENT_DECLARATIONS": str(declarations),
                              "TMPDIR": str(temp)},
                         timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    with sqlite3.connect(db_path) as connection:
        (status, limit, submitted, snapshot, working), = connection.execute(
            "select status, limit_reason, submitted, snapshot_path, working_s from attempts").fetchall()
    assert (status, limit, submitted) == ("limit", "time", 0)
    assert working < 20 + 5  # killed at the budget's end, not when its command's own timeout ran out
    assert "# the sleeper was here" in (Path(snapshot) / "solution.py").read_text()
    # the gateway's socket folder is gone once the container is (snapshots recreate it while it runs)
    assert not list(temp.glob("rbag-*"))
    shutil.rmtree(temp, ignore_errors=True)
