"""`rebench run --agent modular` refuses bad model setups before any sandbox starts,
and the fake model server runs from the command line for trying it by hand."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rebench.agents.base import AgentConfig
from rebench.cli.app import main
from rebench.models import Message, create_model_client

SERVER = Path(__file__).with_name("fake_model_server.py")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "openai/gpt-5"], "set the OPENAI_API_KEY environment variable"),
        (["--model", "anthropic/claude-sonnet-4-5"], "set the ANTHROPIC_API_KEY environment variable"),
        (["--model", "gpt-5"], "invalid model 'gpt-5'"),
        (["--model", "openai-compatible/scripted"], "needs --base-url"),
        ([], "needs --model provider/model"),
        (
            ["--model", "openai-compatible/x", "--base-url", "http://127.0.0.1:9/v1", "--cost-limit", "1"],
            "--cost-limit needs a price",
        ),
        (
            [
                "--model",
                "openai-compatible/x",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--agent-arg",
                "nope=1",
            ],
            "unknown --agent-arg 'nope'",
        ),
    ],
)
def test_bad_model_setup_fails_in_one_line_before_any_sandbox(
    args: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("REBENCH_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "r.db"
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "run",
                "--env",
                "triton_cumsum",
                "--agent",
                "modular",
                "--budget",
                "5m",
                "--backend",
                "local",
                "--db",
                str(db),
                *args,
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert expected in " ".join(err.split())
    assert err.startswith("error:") and len(err.splitlines()) <= 3  # one message, wrapped by the terminal
    assert not db.exists()
    assert not (tmp_path / "cache" / "work").exists() and not (tmp_path / "cache" / "venvs").exists()


def test_fake_server_runs_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"text": "hello from the script"}]}))
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        url = banner.split("OpenAI base URL ")[1].split(")")[0]
        monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)
        client = create_model_client(
            AgentConfig(name="modular", model="openai-compatible/scripted", base_url=url)
        )
        reply = asyncio.run(
            client.complete("", [Message(role="user", content="hi")], [], max_output_tokens=8)
        )
        assert reply.text == "hello from the script" and "1 steps" in banner
    finally:
        proc.terminate()
        proc.wait(timeout=10)
