"""Whole campaigns of the modular agent on the dependency-free `counter` fixture environment
(the real CLI in process, the runner, the local backend, a real SQLite file), driven by
the fake model server through the real `openai` and `anthropic` SDK clients.

Covered here: where commands really run versus what the system prompt says, a context
overflow that trimming cannot fix (the agent's failure, counted, cost kept, not re-run),
a rejected API key (the campaign stops before the next attempt starts), and an agent
that ends without submitting (visible in `attempts list`).
"""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rebench.cli.app import main
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_for, model_server, prices_file, provider_keys  # noqa: F401


def run_campaign(
    server: FakeModelServer, provider: str, db: Path, *extra: str, k: int = 1, budget: str = "2m"
) -> int:
    """`rebench run` in process; returns its exit status (0 when it did not exit)."""
    target = model_for(provider, server)
    argv = [
        "run", "--env", "counter", "--agent", "modular", "--model", target["model"],
        "--base-url", target["base_url"], "--profile", "tiny", "--budget", budget, "-k", str(k),
        "--backend", "local", "--db", str(db), *extra,
    ]  # fmt: skip
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def attempts(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(r) for r in connection.execute("select * from attempts order by id")]


def tool_outputs(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute("select data from events where kind = 'tool_result' order by id").fetchall()
    return [json.loads(data)["output"] for (data,) in rows]


def test_commands_run_where_the_system_prompt_says(
    fixture_envs: Path, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path,
    tmp_path: Path,
) -> None:
    model_server.add(
        {"tool_calls": [call("bash", command="pwd")]},
        {"tool_calls": [call("python", code="import os; print(os.getcwd())")]},
        {"tool_calls": [call("submit")]},
    )
    db = tmp_path / "r.db"
    assert run_campaign(model_server, "anthropic", db) == 0
    bash_pwd, python_pwd = (out.split("stdout:\n")[1].strip() for out in tool_outputs(db)[:2])
    assert bash_pwd == python_pwd and bash_pwd.endswith("/home/solution")
    system = json.dumps(model_server.requests[0].body["system"])
    assert f"Every command starts in your solution folder {bash_pwd}" in system


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_unfixable_context_overflow_is_the_agents_counted_error(
    provider: str, fixture_envs: Path, model_server: FakeModelServer, provider_keys: dict[str, str],
    prices_file: Path, tmp_path: Path,
) -> None:
    """The newest tool output alone is larger than the server accepts, and trimming never
    touches the newest turn: the attempt fails as the agent's, once, and keeps its cost."""
    model_server.max_prompt_chars = 4000
    model_server.add(
        {"tool_calls": [call("python", code="print('x' * 6000)")],
         "usage": {"input_tokens": 500, "output_tokens": 20}},
    )
    db = tmp_path / "r.db"
    assert run_campaign(model_server, provider, db) == 0
    (row,) = attempts(db)
    assert (row["status"], row["error_source"], row["counted"], row["retry_of"]) == ("error", "agent", 1, None)
    assert "does not fit the model's context window" in row["error_message"]
    assert row["cost_usd"] == pytest.approx((500 * 1000 + 20 * 2000) / 1e6)
    assert row["input_tokens"] == 500
    assert len(model_server.requests) == 1 + 4  # one answer, then the failing request and 3 recoveries


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_key_stops_the_campaign_before_the_next_sandbox(
    status: int, fixture_envs: Path, model_server: FakeModelServer, provider_keys: dict[str, str],
    prices_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    model_server.add({"status": status, "error": "bad key"})
    db = tmp_path / "r.db"
    capsys.readouterr()
    assert run_campaign(model_server, "openai", db, k=3) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error" in line or "OPENAI_API_KEY" in line]
    assert line.startswith(f"error: campaign 1 stopped: openai rejected the API key in $OPENAI_API_KEY (HTTP {status}")
    assert provider_keys["OPENAI_API_KEY"] not in err
    rows = attempts(db)
    assert len(rows) == 3 and len(model_server.requests) == 1
    first, *rest = rows
    assert (first["status"], first["error_source"]) == ("error", "user") and first["started_at"] is not None
    assert all(r["status"] == "interrupted" and r["started_at"] is None for r in rest)
    assert all("the campaign stopped" in r["error_message"] for r in rest)
    assert sorted(p.name for p in (tmp_path / f"{db.name}-snapshots").iterdir()) == [f"attempt-{first['id']}"]


def test_text_replies_are_nudged_and_an_unsubmitted_end_is_listed(
    fixture_envs: Path, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Five replies without a tool call do not end the attempt (the agent used to give up
    after three); the one that ends by its budget shows as not submitted in `attempts list`."""
    model_server.add(*[{"text": f"thinking {n}"} for n in range(5)], {"tool_calls": [call("submit")]})
    db = tmp_path / "r.db"
    assert run_campaign(model_server, "openai-compatible", db) == 0
    model_server.add(*[{"text": "hmm", "delay_s": 0.5}] * 40)
    assert run_campaign(model_server, "openai-compatible", db, budget="3s") == 0
    submitted, unsubmitted = attempts(db)
    assert (submitted["status"], submitted["submitted"]) == ("done", 1)
    assert (unsubmitted["status"], unsubmitted["limit_reason"], unsubmitted["submitted"]) == ("limit", "time", 0)
    assert len(model_server.requests) > 6 + 3
    capsys.readouterr()
    main(["attempts", "list", "--db", str(db), "--json"])
    listed = {a["id"]: a["submitted"] for a in json.loads(capsys.readouterr().out)}
    assert listed == {submitted["id"]: True, unsubmitted["id"]: False}
    narrow = subprocess.run(
        [sys.executable, "-m", "rebench.cli.app", "attempts", "list", "--db", str(db)],
        capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}, check=True,
    ).stdout  # a pipe at 80 columns: key columns whole, others dropped (and named), never cut
    lines = narrow.splitlines()
    assert "…" not in narrow and max(len(line) for line in lines) <= 80
    header = next(line for line in lines if "environment" in line)
    assert all(name in header.split() for name in ("id", "environment", "agent", "status", "submitted"))
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in lines if "counter" in line]
    named = [dict(zip(header.replace("┃", " ").split(), row, strict=True)) for row in cells]
    assert [(r["id"], r["environment"], r["agent"], r["submitted"]) for r in named] == [
        (str(unsubmitted["id"]), "counter", "modular", "no"), (str(submitted["id"]), "counter", "modular", "yes")
    ]
    assert "left out to fit 80 columns:" in narrow
