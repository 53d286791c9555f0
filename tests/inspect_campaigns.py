"""Real campaigns for the Inspect export and viewer tests, built once per module.

The kernel environment's tiny profile on the local backend: the session's reference attempt
(`kernel_first_run`, calibrated, re-scored under `rescore_best`) and a modular agent driven by the
fake model server through the real `openai` SDK; and an aide campaign of two attempts on the `counter` fixture.
Everything runs through the real CLI in process into one SQLite file.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rebench.cli.app import main
from tests.conftest import FIXTURE_ENVS, REPO, RecordedRun
from tests.fake_model_server import FakeModelServer
from tests.model_fixtures import OPENAI_TEST_KEY, TEST_PRICES, call

SENTINEL_COMMAND = "echo rebench-sentinel-$((6*7)) && wc -l solution.py"
"""The modular agent's one command: the viewer must show it, and its output (rebench-sentinel-42)."""


@dataclass(frozen=True)
class Campaigns:
    db: Path
    reference_campaign: int
    modular_campaign: int
    aide_campaign: int

    def rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        with sqlite3.connect(self.db) as connection:
            connection.row_factory = sqlite3.Row
            return [dict(r) for r in connection.execute(sql, args)]


def _run(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code, f"rebench {' '.join(argv)} exited with {exc.code}"


def build_campaigns(root: Path, kernel: RecordedRun) -> Iterator[Campaigns]:
    db = root / "campaigns.db"
    shutil.copyfile(kernel.db, db)  # the session's reference campaign, calibrated; the original stays as it was
    envs = root / "envs"
    shutil.copytree(FIXTURE_ENVS, envs)
    prices = root / "prices.toml"
    prices.write_text(TEST_PRICES)
    with pytest.MonkeyPatch.context() as patch, FakeModelServer() as server:
        patch.setenv("OPENAI_API_KEY", OPENAI_TEST_KEY)
        patch.setenv("REBENCH_PRICES", str(prices))
        patch.setenv("REBENCH_ENVIRONMENTS", str(REPO / "environments"))
        server.add(
            {"text": "First a look at the solution.", "tool_calls": [call("bash", command=SENTINEL_COMMAND)]},
            {"tool_calls": [call("score")]},
            {"tool_calls": [call("submit", answer="done")]},
        )
        _run(["run", "--env", "triton_cumsum", "--agent", "modular", "--model", "openai/scripted", "--base-url",
              server.openai_url, "--profile", "tiny", "--budget", "5m", "--final-rule", "best", "--backend", "local",
              "--db", str(db)])
        patch.setenv("REBENCH_ENVIRONMENTS", str(envs))
        text = "{plan}\n\n```\n# file: value.txt\n{value}\n```\n"
        review = {"tool_calls": [call("submit_review", is_bug=False, summary="fine")]}
        for _ in range(2):  # two attempts: the viewer's sample list has rows to show
            server.add({"text": text.format(plan="Draft: seven.", value=7)}, review,
                       {"text": text.format(plan="Try nine.", value=9)}, review)
        _run(["run", "--env", "counter", "--agent", "aide", "--model", "openai-compatible/scripted", "--base-url",
              server.openai_url, "--budget", "2m", "--agent-arg", "num_drafts=1", "--agent-arg", "max_steps=2",
              "-k", "2", "--backend", "local", "--db", str(db)])
    with sqlite3.connect(db) as connection:
        ids = dict(connection.execute("select agent, campaign_id from attempts").fetchall())
    yield Campaigns(db, ids["reference"], ids["modular"], ids["aide"])
