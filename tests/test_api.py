"""The library API in process: whole campaigns through rebench.api on the local backend and the
dependency-free `counter` fixture environment (score = the number in value.txt), real SQLite files."""

from __future__ import annotations

import ast
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench import api
from rebench.errors import RebenchError

from .conftest import REPO


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def replay_spec(tmp_path: Path, actions: list[Any], **fields: Any) -> api.CampaignSpec:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    agent = api.AgentConfig(name="replay", args={"script": str(script)})
    return api.CampaignSpec(**{"environments": ["counter"], "agent": agent, "budget_s": "1m", "backend": "local",
                               **fields})


@pytest.mark.slow
def test_sigterm_interrupts_the_campaign_like_ctrl_c(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    """`rebench run` (which asks run_campaign to cancel on SIGTERM): the attempt is marked interrupted,
    its processes are killed, and the command ends with one line and status 130, not a traceback."""
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"write_file": {"path": "value.txt", "content": "4"}},
                                                  {"score": {}}, {"bash": "sleep 765.25"}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rebench.cli.app", "run", "--env", "counter", "--agent", "replay", "--agent-arg",
         f"script={script}", "--budget", "10m", "--backend", "local", "--db", str(db_path)],
        env={**os.environ, "REBENCH_ENVIRONMENTS": str(fixture_envs)}, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (db_path.exists() and rows_or_none(db_path)):
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "error: interrupted" and "Traceback" not in stderr
    assert rows(db_path, "select status, error_source from attempts") == [("interrupted", "user")]
    assert rows(db_path, "select status from campaigns") == [("interrupted",)]
    assert subprocess.run(["pgrep", "-f", "sleep 765.25"], capture_output=True).returncode == 1


def rows_or_none(db: Path) -> list[tuple[Any, ...]] | None:
    """The score events once the database is migrated, None before."""
    try:
        return rows(db, "select id from events where kind = 'score'")
    except sqlite3.OperationalError:
        return None


class Recorder:
    """Collects what an Observer is told, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def observer(self) -> api.Observer:
        names = ("warning", "note", "log", "calibrated", "planned", "finished")
        callbacks = {name: (lambda value, name=name: self.seen.append((name, value))) for name in names}
        return api.Observer(**callbacks, progress=lambda i, m: self.seen.append(("progress", (i, m))))

    def kinds(self, kind: str) -> list[Any]:
        return [value for name, value in self.seen if name == kind]


def test_run_campaign_returns_the_outcomes_it_wrote(fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    actions = [{"write_file": {"path": "value.txt", "content": "6"}}, {"score": {}},
               {"write_file": {"path": "value.txt", "content": "3"}}, {"score": {}}, {"submit": None}]
    recorder = Recorder()
    result = api.run_campaign(replay_spec(tmp_path, actions, k=2, seed=7), db=db_path, observer=recorder.observer())
    stored = rows(db_path, "select id, campaign_id, status, final_raw, final_normalized, seed, backend "
                           "from attempts order by id")
    assert [(o.attempt_id, result.campaign_id, o.status, o.final_raw, o.final_normalized) for o in result.outcomes] \
        == [row[:5] for row in stored]
    expected = [("done", 6.0, 7, "local"), ("done", 6.0, 8, "local")]
    assert [(row[2], row[3], row[5], row[6]) for row in stored] == expected
    assert result.attempt_ids == [row[0] for row in stored] and result.db == db_path
    assert rows(db_path, "select id, status from campaigns") == [(result.campaign_id, "done")]
    assert rows(db_path, "select count(*) from score_events where kind = 'intermediate'") == [(4,)]
    (planned,) = recorder.kinds("planned")
    assert planned.spec.backend == "local" and planned.attempt_ids == result.attempt_ids
    order = [name for name, _ in recorder.seen if name in ("planned", "finished")]
    assert order == ["planned", "finished", "finished"]
    assert any("does not isolate" in note for note in recorder.kinds("note"))
    assert {i for i, _ in recorder.kinds("progress")} == set(result.attempt_ids)


def test_timing_environments_are_calibrated_once_before_the_campaign(
        fixture_envs: Path, tmp_path: Path, db_path: Path) -> None:
    """A profile whose scores are timings gets this machine's anchors measured first, and only once."""
    toml = fixture_envs / "counter" / "environment.toml"
    timing = 'direction = "higher"\nhardware_dependent = true'
    toml.write_text(toml.read_text().replace('direction = "higher"', timing, 1))
    spec = replay_spec(tmp_path, [{"submit": None}])
    first, second = Recorder(), Recorder()
    api.run_campaign(spec, db=db_path, observer=first.observer())
    (calibration,) = first.kinds("calibrated")
    assert (calibration.start_raw, calibration.reference_raw) == (1.0, 11.0)
    assert any("no calibration" in line for line in first.kinds("log"))
    api.run_campaign(spec, db=db_path, observer=second.observer())
    assert second.kinds("calibrated") == []
    assert rows(db_path, "select anchors_kind from attempts") == [("calibrated",), ("calibrated",)]
    assert rows(db_path, "select count(*) from calibrations") == [(1,)]
    with pytest.raises(RebenchError, match="invalid --repeats 0"):
        api.calibrate("counter", repeats=0, db=db_path)


def test_calibrate_stores_anchors_that_normalization_then_uses(fixture_envs: Path, db_path: Path) -> None:
    assert api.anchors_in_use("counter", db_path)["tiny"].kind == "declared"
    result = api.calibrate("counter", "tiny", "local", repeats=1, db=db_path)
    measured = (result.environment, result.profile, result.start_raw, result.reference_raw)
    assert measured == ("counter", "tiny", 1.0, 11.0)
    in_use = api.anchors_in_use("counter", db_path)
    assert in_use["tiny"].kind == "calibrated" and in_use["tiny"].hardware == result.hardware
    assert in_use["lower"].kind == "declared"
    assert result.summary().startswith("calibrated counter (tiny) on ")


BAD_SPECS = [
    ({"environments": ["counter", "nope"]}, "unknown environment 'nope'"),
    ({"profile": "huge"}, "no profile 'huge'"),
    ({"backend": "cloud"}, "unknown backend 'cloud'"),
    ({"agent": api.AgentConfig(name="nobody")}, "unknown agent 'nobody'"),
    ({"agent": api.AgentConfig(name="replay")}, "needs a script"),
    ({"agent": api.AgentConfig(name="modular", model="nowhere/model")}, "nowhere"),
]


@pytest.mark.parametrize(("fields", "message"), BAD_SPECS, ids=[m for _, m in BAD_SPECS])
def test_bad_input_raises_before_anything_is_written(fixture_envs: Path, tmp_path: Path, db_path: Path,
                                                     fields: dict[str, Any], message: str) -> None:
    spec = replay_spec(tmp_path, [{"submit": None}], **fields)
    with pytest.raises(RebenchError, match=message):
        api.run_campaign(spec, db=db_path)
    assert not db_path.exists()  # the database is opened only after every check passed


@pytest.mark.parametrize(("fields", "message"), [
    ({"k": 0}, "invalid -k 0: must be at least 1"),
    ({"budget_s": "30"}, "invalid duration '30'"),
    ({"budget_s": 0}, "invalid budget 0"),
    ({"parallel": 0}, "invalid --parallel 0"),
    ({"environments": [" "]}, "at least one environment"),
    ({"gpus": [0, 0]}, "invalid --gpus"),
])
def test_a_bad_spec_is_a_one_line_error(fields: dict[str, Any], message: str) -> None:
    base = {"environments": ["counter"], "agent": api.AgentConfig(name="reference"), "budget_s": 60}
    with pytest.raises(RebenchError, match=message) as caught:
        api.CampaignSpec(**{**base, **fields})
    assert "\n" not in str(caught.value)


def test_cli_modules_use_only_the_shared_helpers_of_other_cli_modules() -> None:
    """The CLI is a shell over rebench.api: no command module reaches into another command's logic."""
    for path in sorted((REPO / "rebench" / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rebench.cli."):
                assert node.module == "rebench.cli.common", f"{path.name} imports {node.module}"


@pytest.mark.parametrize("argv", [["run", "--help"], ["report", "--help"], ["envs", "build", "--help"]])
def test_command_help_does_not_load_the_api(argv: list[str]) -> None:
    """A command's --help stays cheap: the API (and what it imports) loads only when the command runs."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "rebench.cli.app", *argv], capture_output=True,
                          text=True, cwd=REPO, timeout=60, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "rebench.cli.common" in imported and "Usage" in done.stdout
    assert imported.isdisjoint({"rebench.api", "rebench.analysis", "rebench.campaign", "rebench.runner", "pandas"})


@pytest.mark.parametrize("update, message", [({"k": 0}, "invalid -k 0"), ({"budget_s": "-5m"}, "-5m"),
                                             ({"parallel": -1}, "invalid --parallel -1")])
def test_run_campaign_validates_a_spec_changed_after_it_was_made(
        update: dict[str, object], message: str, fixture_envs: Path, tmp_path: Path) -> None:
    """`model_copy(update=...)` skips pydantic's validators: k=0 used to write a campaign of 0 attempts and
    a negative budget raised SQLAlchemy's error; both now fail as from the command line, writing nothing."""
    spec = api.CampaignSpec(environments=["counter"], agent=api.AgentConfig(name="reference"), budget_s="1m",
                            backend="local")
    db = tmp_path / "r.db"
    with pytest.raises(RebenchError, match=re.escape(message)):
        api.run_campaign(spec.model_copy(update=update), db=db)
    assert not db.exists()
