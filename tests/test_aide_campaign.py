"""Whole aide campaigns through the real command line (in process), the runner, the local backend
and a real SQLite file, with the fake model server behind the real `openai` SDK.

On the dependency-free `counter` fixture: both scaffolds in one campaign (`--agent modular,aide`)
with scoped and shared agent args, the tree in `rebench attempts show` and in report.html, and
one-line errors for bad scopes. On the kernel environment's `tiny` profile (slow): the issue's
done-when run, a broken draft debugged and then improved, the best node's solution final."""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_main
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_server, prices_file, provider_keys  # noqa: F401


def rows(db: Path, sql: str) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(r) for r in connection.execute(sql)]


def review(is_bug: bool, summary: str) -> dict[str, Any]:
    return {"tool_calls": [call("submit_review", is_bug=is_bug, summary=summary)]}


def written(path: str, content: str, plan: str, run: str | None = None) -> dict[str, Any]:
    text = f"{plan}\n\n```\n# file: {path}\n{content}```\n"
    return {"text": text + (f"\n```bash\n{run}\n```\n" if run else "")}


def run_args(server: FakeModelServer, env: str, agents: str, db: Path, *extra: str,
             budget: str = "2m") -> list[str]:
    return ["run", "--env", env, "--agent", agents, "--model", "openai-compatible/scripted", "--base-url",
            server.openai_url, "--budget", budget, "--backend", "local", "--db", str(db), *extra]


def snapshot_file(attempt: dict[str, Any], name: str) -> str:
    found = sorted(Path(attempt["snapshot_path"]).rglob(name))
    assert found, f"no {name} in the snapshot {attempt['snapshot_path']}"
    return found[0].read_text()


def test_both_scaffolds_in_one_campaign_side_by_side(
    fixture_envs: Path, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    model_server.add(
        # modular: one command, a score call, submit
        {"tool_calls": [call("bash", command="echo 4 > value.txt")]},
        {"tool_calls": [call("score")]},
        {"tool_calls": [call("submit")]},
        # aide: a draft at 7, then an "improvement" to 5 (higher is better here): 7 must end in place
        written("value.txt", "7\n", "Draft: seven."), review(False, "seven"),
        written("value.txt", "5\n", "Try five."), review(False, "five"),
    )
    db = tmp_path / "r.db"
    code, out, err = run_main(run_args(model_server, "counter", "modular,aide", db, "--agent-arg", "aide.num_drafts=1",
                                       "--agent-arg", "aide.max_steps=2", "--agent-arg", "max_output_tokens=1234"),
                              capsys)
    assert code == 0, err
    # the run's summary names each attempt's agent
    summary = [[cell.strip() for cell in line.strip("│ ").split("│")] for line in out.splitlines()
               if line.startswith("│") and line.strip("│ ")[:1].isdigit()]
    assert [row[:3] for row in summary] == [["1", "counter", "modular"], ["2", "counter", "aide"]], out
    modular, aide = rows(db, "select * from attempts order by id")
    assert (modular["agent"], aide["agent"]) == ("modular", "aide")
    assert modular["model"] == aide["model"] == "openai-compatible/scripted"
    assert (modular["final_raw"], aide["final_raw"]) == (4.0, 7.0)
    assert snapshot_file(aide, "value.txt") == "7\n"
    assert aide["input_tokens"] > 0 and aide["output_tokens"] > 0
    # the shared (unscoped) arg reached both agents, the scoped ones only aide (modular would refuse them)
    assert {r.body["max_tokens"] for r in model_server.requests if "submit_review" not in r.text} == {1234}
    assert len(model_server.requests) == 7
    aide_scores = [r["raw"] for r in rows(db, f"select raw from score_events where attempt_id = {aide['id']} "
                                              "and kind = 'intermediate' order by id")]
    assert aide_scores == [7.0, 5.0]

    code, out, _ = run_main(["attempts", "show", str(aide["id"]), "--db", str(db)], capsys)
    assert code == 0
    tree = out[out.index("Solution tree"):]
    assert "Solution tree (2 nodes; best node restored: 1)" in tree
    assert "└── 1 draft: score valid, metric 7  <- best, restored - seven" in tree
    assert "    └── 2 improve: score valid, metric 5 - five" in tree
    code, out, _ = run_main(["attempts", "show", str(aide["id"]), "--db", str(db), "--json"], capsys)
    shown = json.loads(out)["solution_tree"]
    assert shown["best"] == 1 and [(n["node"], n["parent"]) for n in shown["nodes"]] == [(1, None), (2, 1)]

    out_dir = tmp_path / "report"
    code, out, err = run_main(["report", "--db", str(db), "--json", "--budgets", "2m", "--at", "2m",
                               "--n-bootstrap", "20", "--out", str(out_dir), "--tree", str(aide["id"])], capsys)
    assert code == 0, err
    shown_agents = {r["agent"] for r in json.loads(out) if r["environment"] == "counter"}
    assert shown_agents == {"modular/openai-compatible/scripted", "aide/openai-compatible/scripted"}
    page = (out_dir / "report.html").read_text()
    assert f"Solution tree of attempt {aide['id']} (aide on counter)" in page
    assert "<li class='best'><span>1 draft" in page and "+5" in page
    for agent in ("modular", "aide"):
        assert f"<td>{agent}/openai-compatible/scripted</td>" in page


@pytest.mark.parametrize(("agents", "arg", "expected"), [
    ("aide", "foo.num_drafts=2", "invalid --agent-arg foo.num_drafts='2': 'foo' is not an agent of this run "
                                 "(agents: aide)"),
    ("modular,aide", "replay.script=x", "'replay' is not an agent of this run (agents: modular, aide)"),
    ("aide,aide", "num_drafts=2", "agent 'aide' is named twice in --agent"),
    ("modular,aide", "num_drafts=2", "unknown --agent-arg 'num_drafts' for modular"),
    ("aide", "num_drafts=many", "invalid --agent-arg num_drafts='many' for aide"),
])
def test_bad_agent_lists_and_scopes_are_one_line_errors_before_anything_is_written(
    agents: str, arg: str, expected: str, fixture_envs: Path, model_server: FakeModelServer,
    provider_keys: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "r.db"
    code, _, err = run_main(run_args(model_server, "counter", agents, db, "--agent-arg", arg), capsys)
    assert code == 2 and err.startswith("error:") and expected in " ".join(err.split())
    assert len(err.strip().splitlines()) <= 3 and not db.exists() and not model_server.requests


def test_tree_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rebench.store.db import Store

    db = tmp_path / "r.db"
    Store(db).close()
    code, _, err = run_main(["report", "--db", str(db), "--tree", "1"], capsys)
    assert code == 2 and "--tree draws the attempt's solution tree into report.html: give --out DIR" in err
    code, _, err = run_main(["report", "--db", str(db), "--tree", "99", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "no attempt with id 99" in err


BROKEN_DRAFT = '''import numpy as np


def prefix_sum(x):
    # forgot `import torch`: every call fails with a NameError
    return torch.cumsum(x, dim=0).to(torch.int32)
'''
CHECK = "python -c \"import torch, solution; print(solution.prefix_sum(torch.arange(-3, 5, dtype=torch.int32)))\""


@pytest.mark.slow
@pytest.mark.torch
def test_kernel_tiny_attempt_debugs_a_broken_draft_improves_and_ends_on_the_best_node(
    model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's done-when run on triton_cumsum (tiny): draft 1 is broken on purpose, its debug (node 2)
    is the one-pass Numba solution, and the improvement (node 3) goes back to the slow PyTorch start,
    so node 2 must be the solution the attempt ends with. Declared anchors (no calibration): the test
    is about the tree and the final solution, not the normalized number."""
    pytest.importorskip("torch")
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(REPO / "environments"))
    fast = (REPO / "environments/triton_cumsum/reference/solution.py").read_text()
    slow = (REPO / "environments/triton_cumsum/workspace/solution.py").read_text()
    model_server.add(
        written("solution.py", BROKEN_DRAFT, "Draft: PyTorch's cumsum, narrowed to int32.", run=CHECK),
        review(True, "NameError: torch is not imported."),
        written("solution.py", fast, "One pass with Numba carrying the parity and the sum.", run=CHECK),
        review(False, "Valid and fast."),
        written("solution.py", slow, "Try PyTorch ops instead of the loop.", run=CHECK),
        review(False, "Valid but slower."),
    )
    db = tmp_path / "kernel.db"
    code, _, err = run_main(run_args(model_server, "triton_cumsum", "aide", db, "--profile", "tiny",
                                     "--no-calibrate", "--final-rule", "best", "--agent-arg", "num_drafts=1",
                                     "--agent-arg", "debug_prob=1", "--agent-arg", "max_steps=3", budget="10m"),
                            capsys)
    assert code == 0, err
    (attempt,) = rows(db, "select * from attempts")
    assert attempt["status"] == "done" and attempt["submitted"] == 1, attempt["error_message"]
    nodes = [json.loads(r["data"]) for r in rows(db, "select data from events where kind = 'aide_node' order by seq")]
    assert [(n["node"], n["parent"], n["step"], n["buggy"]) for n in nodes] == [
        (1, None, "draft", True), (2, 1, "debug", False), (3, 2, "improve", False)]
    assert "NameError" in nodes[0]["output_tail"] and nodes[0]["score_valid"] is False
    assert nodes[1]["score"] < nodes[2]["score"], "the Numba pass must beat the PyTorch start"
    assert snapshot_file(attempt, "solution.py") == fast, "the attempt ends on the best node's solution"
    scores = [r["raw"] for r in rows(db, f"select raw from score_events where attempt_id = {attempt['id']} "
                                         "and kind = 'intermediate' and valid order by id")]
    assert min(scores) == nodes[1]["score"] == attempt["final_raw"]
    assert attempt["input_tokens"] > 0 and attempt["output_tokens"] > 0 and attempt["cost_usd"] > 0
    assert len(rows(db, "select id from events where kind = 'model_call'")) == 6


def test_aide_without_a_model_is_a_one_line_error(
    fixture_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "r.db"
    code, _, err = run_main(["run", "--env", "counter", "--agent", "modular,aide", "--budget", "1m",
                             "--backend", "local", "--db", str(db)], capsys)
    assert code == 2 and "agent 'modular' needs --model provider/model" in " ".join(err.split())
    assert len(err.strip().splitlines()) <= 3 and not db.exists()
