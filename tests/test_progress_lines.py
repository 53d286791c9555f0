"""Long campaigns never go silent: in a pipe `rebench run` prints, every `--progress-every`, a
line for the campaign and one per running attempt (working time used and left, latest score,
tokens, cost), and `campaigns show --watch` prints the same from another process; on a
terminal the live view has a row per running attempt. Working time comes from the store alone."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from rebench.scheduler.attempt_progress import running_attempts
from rebench.scheduler.view import CampaignLive
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Campaign, CampaignStatus, Event, Pause, ScoreEvent

from .conftest import REPO, run_cli, run_main
from .sched_support import replay_script, rows

LINE = re.compile(r"attempt (\d+) \(counter, replay\): (\d+)s used, (\d+)s left; latest score (\S+); "
                  r"(\d+) tokens; \$(\d+\.\d{4})")


@pytest.mark.slow
def test_a_piped_run_prints_each_running_attempt_every_interval(fixture_envs: Path, tmp_path: Path) -> None:
    """A 4 s campaign with lines every second, watched meanwhile from a second process through a pipe."""
    db = tmp_path / "rebench.db"
    Store(db).close()  # migrated before the harness starts: the watcher polls it
    script = replay_script(tmp_path / "s.yaml", 7, 120)
    env = {**os.environ, "COLUMNS": "80", "REBENCH_ENVIRONMENTS": str(fixture_envs)}
    args = ["run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--budget", "4s",
            "--backend", "local", "--progress-every", "1s", "--db", str(db)]
    run = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", *args], env=env, cwd=REPO, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not rows(db, "select count(*) from campaigns")[0][0]:
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.1)
        watched = run_cli("campaigns", "show", "1", "--watch", "--progress-every", "1s", "--db", str(db),
                          timeout=60)
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err[-2000:]
    # the run prints a line a second over its 4 s budget; the watcher, started on a busy machine a few
    # seconds late (a Python start-up), may catch fewer, but at least one
    for text, least in ((out, 2), (watched.stdout, 1)):
        lines = [m.groups() for m in LINE.finditer(text)]
        assert len(lines) >= least, text
        for attempt, used, left, _score, tokens, cost in lines:
            assert attempt == "1" and int(used) + int(left) in (3, 4, 5), text  # rounded to whole seconds
            assert (tokens, cost) == ("0", "0.0000")
        assert [int(used) for _, used, *_ in lines] == sorted(int(used) for _, used, *_ in lines)
        if text is out:
            assert "7" in [score for _, _, _, score, _, _ in lines], text  # the score call's raw value
        assert re.search(r"campaign 1: 0/1 done, 1 running, 0 queued; at most \d+s of budgets left", text), text


def test_working_time_of_a_running_attempt_from_its_rows(db_path: Path) -> None:
    """Clock origin from the newest event: recorded at working 20 s, 10 s ago, after a 5 s setup
    pause; a pause opened 5 s ago. Now is offset 35: 35 - 5 - 5 = 25 s used."""
    now = datetime.now(UTC)
    store = Store(db_path)
    with store.session() as session:
        campaign = Campaign(spec={}, status=CampaignStatus.RUNNING)
        session.add(campaign)
        session.flush()
        attempt = Attempt(campaign_id=campaign.id, environment="counter", agent="replay", budget_s=60.0,
                          status=AttemptStatus.RUNNING, input_tokens=100, output_tokens=20, cost_usd=0.5)
        session.add(attempt)
        session.flush()
        session.add_all([
            Pause(attempt_id=attempt.id, reason="setup", start_s=0.0, end_s=5.0),
            Pause(attempt_id=attempt.id, reason="provider", start_s=30.0, end_s=None),
            Event(attempt_id=attempt.id, seq=1, kind="note", working_s=20.0, created_at=now - timedelta(seconds=10),
                  data={"message": "x"}),
            ScoreEvent(attempt_id=attempt.id, raw=None, valid=False, working_s=15.0,
                       created_at=now - timedelta(seconds=15)),
        ])
        campaign_id = campaign.id
    (shown,) = running_attempts(store, campaign_id, now=now)
    store.close()
    assert shown.working_s == pytest.approx(25.0, abs=0.01) and shown.left_s == pytest.approx(35.0, abs=0.01)
    assert (shown.tokens, shown.cost_usd, shown.score_text()) == (120, 0.5, "invalid")


def test_the_live_view_has_a_row_per_running_attempt(db_path: Path) -> None:
    store = Store(db_path)
    with store.session() as session:
        campaign = Campaign(spec={}, status=CampaignStatus.RUNNING)
        session.add(campaign)
        session.flush()
        session.add(Attempt(campaign_id=campaign.id, environment="counter", agent="replay", budget_s=600.0,
                            status=AttemptStatus.RUNNING, input_tokens=1234, cost_usd=0.25))
        campaign_id = campaign.id
    store.close()
    out = io.StringIO()
    live = CampaignLive(db_path, Console(file=out, force_terminal=True, width=150), interval_s=0.05)
    live.start(campaign_id)
    live.stop()
    text = out.getvalue()
    assert "running attempts" in text and "10m" in text and "1234" in text and "$0.2500" in text, text


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--progress-every", "5x"], {}, "invalid --progress-every '5x'"),
    ([], {"REBENCH_PROGRESS_EVERY": "often"}, "invalid REBENCH_PROGRESS_EVERY 'often'"),
])
def test_a_bad_progress_interval_is_one_line(argv: list[str], env: dict[str, str], message: str, db_path: Path,
                                             fixture_envs: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, _, err = run_main(["run", "--env", "counter", "--agent", "reference", "--budget", "1m", *argv,
                             "--db", str(db_path)], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not db_path.exists()
