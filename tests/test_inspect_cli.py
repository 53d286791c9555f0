"""`rebench export inspect` and `rebench view` without Inspect installed, and the viewer's bind rule.

Inspect's absence is real for the process: its modules are made unimportable before rebench loads
(as on an install without the `inspect` extra, which .ci/run also checks on a wheel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_main

WITHOUT_INSPECT = (
    "import sys\n"
    "sys.modules.update({'inspect_ai': None, 'inspect_ai.log': None})\n"
    "from rebench.cli.app import main\n"
    "main(sys.argv[1:])\n"
)


@pytest.mark.parametrize("command", [["export", "inspect", "--out", "logs"], ["view"]])
def test_without_the_extra_one_line_says_how_to_install_it(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "r.db"
    done = subprocess.run([sys.executable, "-c", WITHOUT_INSPECT, *command, "--db", str(db)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'rebench[inspect]'" in lines[0], done.stderr
    assert not db.exists() and not (tmp_path / "logs").exists(), "nothing is written"


def test_the_viewer_binds_beyond_loopback_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    code, _, err = run_main(["view", "--host", "0.0.0.0", "--db", str(db)], capsys)
    assert code == 2 and "--host '0.0.0.0' is not a loopback address" in err and "--allow-remote" in err
    assert len(err.strip().splitlines()) == 1 and not db.exists()


def test_model_calls_recorded_before_requests_were_stored_still_export(tmp_path: Path) -> None:
    """A version-1 `model_call` row (reply only, as written before requests were stored) exports as a model
    event with its reply and an empty input, beside a version-2 row whose request is rebuilt."""
    from inspect_ai.log import read_eval_log

    from rebench.export.inspect_log import export_inspect
    from rebench.models import Message
    from rebench.models.requests import RequestLog
    from rebench.store import Attempt, Campaign, Event, Store

    store = Store(tmp_path / "r.db")
    usage = {"model": "openai/x", "input_tokens": 3, "output_tokens": 2, "cached_tokens": 0, "cost_usd": 0.5,
             "wait_s": 0.1}
    request = RequestLog().record("be brief", [Message(role="user", content="the task")], [], max_output_tokens=9)
    with store.session() as session:
        campaign = Campaign(spec={})
        session.add(campaign)
        session.flush()
        attempt = Attempt(campaign_id=campaign.id, environment="counter", profile="tiny", agent="modular",
                          model="openai/x", budget_s=60.0, status="done")
        session.add(attempt)
        session.flush()
        session.add_all([
            Event(attempt_id=attempt.id, seq=1, kind="start", data={"v": 1, "instructions": "the task",
                  "agent": "modular", "model": "openai/x", "budget_s": 60.0, "backend": "local"}),
            Event(attempt_id=attempt.id, seq=2, kind="model_call", data={**usage, "text": "old reply"}),
            Event(attempt_id=attempt.id, seq=3, kind="model_call", data={"v": 2, **usage, "text": "new reply",
                                                                         "request": request}),
        ])
    (log,) = export_inspect(store, tmp_path / "logs").logs
    store.close()
    (sample,) = read_eval_log(log.path).samples or []
    old, new = (e for e in sample.events if e.event == "model")
    assert old.input == [] and old.output.completion == "old reply" and "not stored" in old.metadata["request"]
    assert [m.text for m in new.input] == ["be brief", "the task"] and new.config.max_tokens == 9
