"""rust_codecontests_inference end to end with its real model: the `ci` profile built (the
generator and the trained model), then whole attempts through the real CLI on the local backend,
the gateway serving the model to the solution's code and the scorer. Nothing is faked but the
modular agent's own LLM (the fake model server scripts its turns).

Slow: the `ci` build trains the model (under 3 minutes, once per test session's cache)."""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rebench.cli.app import main
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_for, model_server, prices_file, provider_keys  # noqa: F401

from .conftest import REPO, RecordedRun
from .reference_runs import rust_reference_runs  # noqa: F401

ENV = "rust_codecontests_inference"
REFERENCE = (REPO / "environments" / ENV / "reference" / "solve_code_contests_rust.py").read_text()

pytestmark = [pytest.mark.slow, pytest.mark.one_core]  # the fixed model answers within a wall-clock limit per problem


def run(db: Path, *argv: str) -> int:
    try:
        main(["run", "--env", ENV, "--profile", "ci", "--backend", "local", "--db", str(db), *argv])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def scores(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(row) for row in connection.execute("select * from score_events order by id")]


def gateway_rows(db: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        return [dict(row) for row in connection.execute("select * from gateway_requests order by id")]


def test_starting_and_reference_solutions_score_through_the_gateway_the_same_twice(
        rust_reference_runs: RecordedRun) -> None:
    """Two attempts of the reference agent (each: a baseline score of the starting solution, then
    the reference's): every problem of the hidden split is judged, the reference solves more than
    one sample does, and each solution scores exactly the same in both attempts (fresh sandboxes
    and gateways; sampling is seeded per request), as hardware_dependent = false claims."""
    rows = scores(rust_reference_runs.db)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    starts, references = by_kind["baseline"], by_kind["intermediate"]
    assert len(starts) == 2 and len(references) == 2
    for row in rows:
        message = json.loads(row["message"])
        assert row["raw"] is not None and message["n_problems"] == 10, message
        assert "error" not in message, message
    assert starts[0]["raw"] == starts[1]["raw"]
    assert references[0]["raw"] == references[1]["raw"]
    assert references[0]["raw"] > starts[0]["raw"]
    meters = {row["meter"] for row in gateway_rows(rust_reference_runs.db)}
    assert meters == {"subject"}  # the reference agent itself never calls the model; its module, scored, does


def test_modular_agent_writes_a_solution_evaluates_and_scores(
    tmp_path: Path, model_server: FakeModelServer, provider_keys: dict[str, str], prices_file: Path,
) -> None:
    """The modular agent, its turns scripted: it writes a best-of-n module, runs evaluate.py on
    three validation problems (its own meter), scores (the scorer's meter) and submits."""
    model_server.add(
        {"tool_calls": [call("python", code=f"open('solve_code_contests_rust.py', 'w').write({REFERENCE!r})")]},
        # the bash tool's default 10 s is too short for three problems beside another test's load
        {"tool_calls": [call("bash", command="python evaluate.py data/valid.jsonl solve_code_contests_rust "
                                             "--api-env $REBENCH_HOME/api.env --limit 3", timeout_s=120)]},
        {"tool_calls": [call("score")]},
        {"tool_calls": [call("submit")]},
    )
    db = tmp_path / "r.db"
    target = model_for("openai", model_server)
    assert run(db, "--agent", "modular", "--model", target["model"], "--base-url", target["base_url"],
               "--budget", "5m") == 0
    with sqlite3.connect(db) as connection:
        outputs = [json.loads(data)["output"] for (data,) in
                   connection.execute("select data from events where kind = 'tool_result' order by id")]
        status = connection.execute("select status from attempts").fetchone()[0]
    assert status == "done"
    evaluation = json.loads(outputs[1].split("stdout:\n")[1].strip().splitlines()[-1])
    assert evaluation["n_problems"] == 3 and 0 <= evaluation["n_successes"] <= 3
    scored = [row for row in scores(db) if row["kind"] == "intermediate"]
    assert scored and scored[0]["raw"] is not None
    assert json.loads(scored[0]["message"])["n_problems"] == 10
    meters = {row["meter"] for row in gateway_rows(db) if row["status"] == 200}
    assert meters == {"agent", "subject"}  # the solution scored calls the model on the call's own token
