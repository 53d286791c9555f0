"""Whole attempts of the modular agent through `rebench run` (the CLI, the runner, the local
backend, a real SQLite file) on the kernel environment's `ci` profile (tiny's task with two
re-score rounds instead of seven: these tests check the runner, not the timing), driven by the
fake model server through the real SDK clients. Each attempt scores the starting
solution first (~10 s), so these are slow."""
# ruff: noqa: F811  (pytest fixtures imported from model_fixtures are parameters here)

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rebench.cli.app import main
from rebench.environments.registry import EnvironmentRegistry
from tests.conftest import REPO, run_cli
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import call, model_for, model_server, prices_file, provider_keys  # noqa: F401

pytestmark = pytest.mark.slow

SERVER = Path(__file__).with_name("fake_model_server.py")

FASTER_SOLUTION = """import torch


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    positive = x > 0
    odd = torch.cumsum(positive, dim=0, dtype=torch.int32)
    odd.sub_(positive.to(torch.int32)).bitwise_and_(1)
    odd.mul_(x)
    return torch.cumsum(odd, dim=0, dtype=torch.int32)
"""


def rebench_run(server: FakeModelServer, provider: str, db: Path, *extra: str, budget: str = "5m") -> None:
    target = model_for(provider, server)
    main(
        [
            "run",
            "--env",
            "triton_cumsum",
            "--agent",
            "modular",
            "--model",
            target["model"],
            "--base-url",
            target["base_url"],
            "--profile",
            "ci",
            "--budget",
            budget,
            "--backend",
            "local",
            "--db",
            str(db),
            "--no-calibrate",  # these tests check accounting, not normalized scores: skip measuring anchors
            *extra,
        ]
    )


def show(db: Path, capsys: pytest.CaptureFixture[str], attempt_id: int = 1) -> dict[str, Any]:
    capsys.readouterr()
    main(["attempts", "show", str(attempt_id), "--db", str(db), "--json"])
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def usage(inp: int, out: int, cached: int = 0) -> dict[str, int]:
    return {"input_tokens": inp, "output_tokens": out, "cached_tokens": cached}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_agent_writes_a_faster_kernel_scores_and_submits(
    provider: str,
    model_server: FakeModelServer,
    provider_keys: dict[str, str],
    prices_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = [
        {
            "text": "Look around first.",
            "tool_calls": [call("bash", command="env; cat $HOME/solution/solution.py")],
            "usage": usage(1200, 40, 200),
            "delay_s": 0.3,
        },
        {
            "tool_calls": [call("bash", command=f"cat > $HOME/solution/solution.py <<'PY'\n{FASTER_SOLUTION}PY")],
            "usage": usage(1500, 120, 1000),
        },
        {"tool_calls": [call("score")], "usage": usage(1800, 10, 1400)},
        {"tool_calls": [call("score_log")], "usage": usage(1900, 10, 1700)},
        {"text": "Faster and correct; done.", "tool_calls": [call("submit")], "usage": usage(2000, 12, 1800)},
    ]
    model_server.add(*steps)
    db = tmp_path / "r.db"
    rebench_run(model_server, provider, db)
    attempt = show(db, capsys)

    assert attempt["status"] == "done" and "submit" in [e["kind"] for e in attempt["events"]]
    assert attempt["input_tokens"] == sum(s["usage"]["input_tokens"] for s in steps)
    assert attempt["output_tokens"] == sum(s["usage"]["output_tokens"] for s in steps)
    assert attempt["cached_tokens"] == sum(s["usage"]["cached_tokens"] for s in steps)
    expected_cost = sum(
        ((u["input_tokens"] - u["cached_tokens"]) * 1000 + u["cached_tokens"] * 100 + u["output_tokens"] * 2000) / 1e6
        for u in (s["usage"] for s in steps)
    )
    assert attempt["cost_usd"] == pytest.approx(expected_cost)
    assert attempt["model_wait_s"] >= 0.3

    # the kernel's ci profile (as tiny does) re-scores the scored solution when the attempt ends, in rounds with the
    # starting and reference solutions (its window anchors); the median counts
    baseline, intermediate, *window = attempt["scores"]
    assert baseline["kind"] == "baseline" and intermediate["kind"] == "intermediate"
    assert intermediate["valid"] and intermediate["raw"] < baseline["raw"]
    repeats = EnvironmentRegistry(REPO / "environments").get("triton_cumsum").profile("ci").rescore.repeats
    assert [r["kind"] for r in window] == ["anchor_start", "anchor_reference", "rescore"] * repeats
    rescores = [r for r in window if r["kind"] == "rescore"]
    assert all(r["valid"] for r in window) and attempt["anchors_kind"] == "window"
    assert attempt["final_raw"] == pytest.approx(statistics.median(r["raw"] for r in rescores))
    assert (attempt["final_rule"], attempt["rule_raw"]) == ("rescore_best", intermediate["raw"])

    events = attempt["events"]
    calls = [e["data"] for e in events if e["kind"] == "model_call"]
    assert len(calls) == 5 and calls[0]["text"] == "Look around first."
    assert [c["tool_calls"][0]["name"] for c in calls] == ["bash", "bash", "score", "score_log", "submit"]
    results = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert [r["tool"] for r in results] == ["bash", "bash", "score", "score_log", "submit"]
    assert "time_ms" in results[2]["output"] and "time_ms" in results[3]["output"]
    assert "time_ms" in model_server.requests[-2].text

    environment_listing = results[0]["output"]
    assert "PATH=" in environment_listing
    for name, key in provider_keys.items():
        assert name not in environment_listing and key not in environment_listing
        assert key not in json.dumps(attempt)
        for stored in tmp_path.glob("r.db*"):  # the database, its log and its snapshot folder
            for file in [stored] if stored.is_file() else [f for f in stored.rglob("*") if f.is_file()]:
                assert key.encode() not in file.read_bytes(), file
    headers = model_server.requests[0].headers
    sent = headers.get("x-api-key") or headers["authorization"]
    assert sent.endswith(provider_keys[f"{provider.upper()}_API_KEY"])


def test_rate_limit_waits_pause_the_clock_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's "done when": `rebench run ... --model openai-compatible/scripted --base-url ...`
    from the command line against the fake server started from its own command line.
    The server answers 429 twice before the reply; both waits must be paused time."""
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"status": 429, "retry_after": 1},
                {"status": 429, "retry_after": 1},
                {"tool_calls": [call("submit")], "usage": usage(100, 5)},
            ]
        )
    )
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--port", "0", "--script", str(script)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        base_url = server.stdout.readline().split("OpenAI base URL ")[1].split(")")[0]
        db = tmp_path / "r.db"
        result = run_cli(
            "run",
            "--env",
            "triton_cumsum",
            "--agent",
            "modular",
            "--model",
            "openai-compatible/scripted",
            "--base-url",
            base_url,
            "--profile",
            "ci",
            "--budget",
            "5m",
            "--backend",
            "local",
            "--db",
            str(db),
            "--no-calibrate",
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert result.returncode == 0, result.stderr
    attempt = show(db, capsys)
    assert attempt["status"] == "done" and attempt["input_tokens"] == 100
    retries = [p for p in attempt["pauses"] if p["reason"] == "provider-retry"]
    assert len(retries) == 2
    assert all(0.9 <= p["end_s"] - p["start_s"] < 3 for p in retries)
    paused = sum(p["end_s"] - p["start_s"] for p in attempt["pauses"])
    assert attempt["working_s"] == pytest.approx(attempt["wall_s"] - paused, abs=0.3)
    assert attempt["working_s"] < attempt["wall_s"] - 1.8
    assert [e["kind"] for e in attempt["events"]].count("provider-retry") == 2
    (model_call,) = [e["data"] for e in attempt["events"] if e["kind"] == "model_call"]
    assert model_call["extra"]["retries"] == 2


@pytest.mark.parametrize(
    ("option", "which"), [(("--token-limit", "1500"), "tokens"), (("--cost-limit", "1.5"), "cost")]
)
def test_token_and_cost_limits_end_the_attempt(
    option: tuple[str, str],
    which: str,
    model_server: FakeModelServer,
    provider_keys: dict[str, str],
    prices_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # each call: 800 input tokens ($0.80) + 10 output tokens ($0.02)
    model_server.add(*[{"tool_calls": [call("bash", command="true")], "usage": usage(800, 10)}] * 4)
    db = tmp_path / "r.db"
    rebench_run(model_server, "openai-compatible", db, *option)
    attempt = show(db, capsys)
    assert attempt["status"] == "limit" and attempt["limit_reason"] == which
    assert attempt["input_tokens"] == 1600 and attempt["cost_usd"] == pytest.approx(1.64)
    limits = [e["data"] for e in attempt["events"] if e["kind"] == "limit"]
    assert [entry["which"] for entry in limits] == [which]
    assert len(model_server.requests) == 2
