"""One database with an attempt of each agent kind, for the ATIF export's tests; cheap, no Docker.

- claude-code and codex: their real gateway (rebench.gateway.agent_meter) in front of the fake model
  server, the real `anthropic` and `openai` SDKs making the calls an installed agent makes (streamed
  Messages with a tool use; Responses with a function call), recorded by the runner's recorder
  (tests/test_inspect_gateway_calls.py; the CLIs themselves run in tests/test_installed_agents.py);
- modular and aide: `rebench run` on the `counter` fixture, local backend, the fake model server
  answering through the real `openai` SDK;
- replay: a scripted attempt (a valid, an invalid and a valid score call);
- human: the real AttemptRunner with the expert's `task` commands sent to the real handler
  (tests/test_human_tasks.py's Driver), as the container's `task` client sends them.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench import api
from rebench.store.db import Store
from tests.conftest import FIXTURE_ENVS, run_main
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import OPENAI_TEST_KEY, TEST_PRICES, call
from tests.test_human_tasks import Driver, _run
from tests.test_inspect_gateway_calls import claude_attempt, codex_attempt

SAID = "Plan: \"quote\" \\ back\tslash, caf\u00e9 \u2603 \U0001F600, bell\x07 esc\x1b[31m nul-free \u2028 end"
"""The modular agent's first reply: quotes, backslash, tab, non-ASCII and control characters, which the
export must keep byte for byte (JSON escapes only)."""
COMMAND = "echo atif-sentinel-$((6*7))"


@dataclass(frozen=True)
class AgentKinds:
    db: Path
    ids: dict[str, int]
    """Attempt id by agent name."""

    def rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        with sqlite3.connect(self.db) as connection:
            connection.row_factory = sqlite3.Row
            return [dict(r) for r in connection.execute(sql, args)]


def build(root: Path) -> Iterator[AgentKinds]:
    with pytest.MonkeyPatch.context() as patch:
        claude = claude_attempt(root, patch)  # root/scratch.db: every attempt below goes into it too
        codex = codex_attempt(root, patch)
        for ctx in (claude, codex):
            ctx.recorder.close()
        db = claude.store.path
        shutil.copytree(FIXTURE_ENVS, root / "envs")
        (root / "prices.toml").write_text(TEST_PRICES)
        script = root / "script.yaml"
        script.write_text(yaml.safe_dump({"actions": [
            {"write_file": {"path": "value.txt", "content": "6"}}, {"score": {}},
            {"write_file": {"path": "value.txt", "content": "oops"}}, {"score": {}}, {"submit": None}]}))
        patch.setenv("REBENCH_ENVIRONMENTS", str(root / "envs"))
        patch.setenv("REBENCH_PRICES", str(root / "prices.toml"))
        patch.setenv("OPENAI_API_KEY", OPENAI_TEST_KEY)
        with FakeModelServer() as server:
            api.run_campaign(api.CampaignSpec(environments=["counter"], budget_s="1m", backend="local",
                                              agent=api.AgentConfig(name="replay", args={"script": str(script)})),
                             db=db)
            server.add({"text": SAID, "tool_calls": [call("bash", command=COMMAND)]},
                       {"tool_calls": [call("score")]},
                       {"text": "Done.", "tool_calls": [call("submit", answer="done")]})
            api.run_campaign(api.CampaignSpec(environments=["counter"], budget_s="2m", backend="local",
                                              agent=api.AgentConfig(name="modular", model="openai/scripted",
                                                                    base_url=server.openai_url)), db=db)
            text = "{plan}\n\n```\n# file: value.txt\n{value}\n```\n"
            review = {"tool_calls": [call("submit_review", is_bug=False, summary="fine")]}
            server.add({"text": text.format(plan="Draft: seven.", value=7)}, review,
                       {"text": text.format(plan="Try nine.", value=9)}, review)
            api.run_campaign(api.CampaignSpec(
                environments=["counter"], budget_s="2m", backend="local",
                agent=api.AgentConfig(name="aide", model="openai-compatible/scripted", base_url=server.openai_url,
                                      args={"num_drafts": "1", "max_steps": "2"})), db=db)
        api.build_environment("counter", "tiny", "local")
        store = Store(db)
        try:
            _run(store, Driver([("start", [], 0), ("write", ["7"], 0), ("score", [], 0),
                                ("note", ["trying", "seven"], 0), ("submit", [], 0)]))
        finally:
            store.close()
    with sqlite3.connect(db) as connection:
        ids = dict(connection.execute("select agent, max(id) from attempts group by agent").fetchall())
    assert set(ids) == {"claude-code", "codex", "replay", "modular", "aide", "human"}, ids
    yield AgentKinds(db, ids)


def export(db: Path, out: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[int, dict[str, Any]]:
    """`rebench export atif` through the real CLI: each trajectory by attempt id, read as JSON."""
    code, stdout, stderr = run_main(["export", "atif", "--db", str(db), "--out", str(out), "--json", *args], capsys)
    assert code == 0, stderr
    return {t["attempt"]: {**t, "file": json.loads(Path(t["path"]).read_text(encoding="ascii"))}
            for t in json.loads(stdout)["trajectories"]}


def steps(trajectory: dict[str, Any], source: str | None = None) -> list[dict[str, Any]]:
    return [s for s in trajectory["file"]["steps"] if source is None or s["source"] == source]


def calls(trajectory: dict[str, Any]) -> list[tuple[str, dict[str, Any], list[str]]]:
    """(function, arguments, observation contents) of every tool call, in order."""
    found = []
    for step in steps(trajectory, "agent"):
        results = (step.get("observation") or {}).get("results", [])
        for made in step.get("tool_calls") or []:
            found.append((made["function_name"], made["arguments"],
                          [r["content"] for r in results if r.get("source_call_id") == made["tool_call_id"]]))
    return found
