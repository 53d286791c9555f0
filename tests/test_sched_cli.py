"""`rebench campaigns list|show` and the live view of `rebench run`, on a campaign that another
(live) process holds: what they show comes from the store alone."""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console

from rebench.scheduler.leases import LeaseBroker
from rebench.scheduler.view import CampaignLive
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Campaign, CampaignStatus

from .conftest import run_main
from .sched_support import rows


def _running_campaign(db: Path) -> int:
    """Two environments: one attempt done in 10 min, one running, two queued, one uncounted try;
    its runner is the parent process (alive, on this host), holding the campaign's lease."""
    store = Store(db)
    start = datetime.now(UTC) - timedelta(hours=1)
    with store.session() as session:
        campaign = Campaign(spec={}, status=CampaignStatus.RUNNING)
        session.add(campaign)
        session.flush()

        def attempt(env: str, status: AttemptStatus, **extra: object) -> Attempt:
            row = Attempt(campaign_id=campaign.id, environment=env, agent="modular", budget_s=600.0,
                          status=status, **extra)
            session.add(row)
            session.flush()
            return row

        attempt("alpha", AttemptStatus.DONE, started_at=start, ended_at=start + timedelta(minutes=10))
        cut = attempt("alpha", AttemptStatus.INTERRUPTED, started_at=start, counted=False)
        attempt("alpha", AttemptStatus.RUNNING, started_at=start, retry_of=cut.id)
        attempt("beta", AttemptStatus.QUEUED)
        attempt("beta", AttemptStatus.QUEUED)
        campaign_id = campaign.id
    LeaseBroker(store, pid=os.getppid()).hold_campaign(campaign_id)
    store.close()
    return campaign_id


def test_show_and_list_a_campaign_running_in_another_process(db_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    campaign = _running_campaign(db_path)
    code, out, err = run_main(["campaigns", "show", str(campaign), "--json", "--db", str(db_path)], capsys)
    assert code == 0, err
    shown = json.loads(out)
    assert shown["state"] == "running" and shown["holder"].startswith(f"{os.getppid()}@")
    groups = {g["environment"]: g for g in shown["groups"]}
    assert (groups["alpha"]["planned"], groups["alpha"]["done"], groups["alpha"]["running"],
            groups["alpha"]["retried"]) == (2, 1, 1, 1)
    assert (groups["beta"]["planned"], groups["beta"]["queued"]) == (2, 2)
    assert shown["eta_s"] == pytest.approx(3 * 600.0)  # 3 left x 10 min, one at a time
    code, out, _ = run_main(["campaigns", "show", str(campaign), "--db", str(db_path)], capsys)
    assert code == 0 and "1/2" in out and "0/2" in out and "ETA 30m" in out, out
    code, out, _ = run_main(["campaigns", "list", "--db", str(db_path)], capsys)
    assert code == 0 and "running" in out and "1/4" in out, out


def test_a_campaign_whose_runner_died_shows_as_orphaned(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    campaign = _running_campaign(db_path)
    store = Store(db_path)
    with store.session() as session:  # the runner's heartbeat stopped long ago
        from rebench.scheduler.leases import Lease

        for lease in session.query(Lease):
            lease.heartbeat_at = datetime.now(UTC) - timedelta(hours=1)
    code, out, _ = run_main(["campaigns", "show", str(campaign), "--db", str(db_path)], capsys)
    assert code == 0 and "orphaned" in out and f"--resume {campaign}" in out, out
    code, _, err = run_main(["campaigns", "show", "999", "--db", str(db_path)], capsys)
    assert code == 2 and "no campaign 999" in err


def test_run_live_view_draws_the_bars_on_a_terminal(db_path: Path) -> None:
    campaign = _running_campaign(db_path)
    out = io.StringIO()
    live = CampaignLive(db_path, Console(file=out, force_terminal=True, width=150), interval_s=0.05)
    live.start(campaign)
    live.stop()
    text = out.getvalue()
    assert f"campaign {campaign}: running" in text and "1/4 done, 1 running, 2 queued" in text, text
    piped = io.StringIO()
    quiet = CampaignLive(db_path, Console(file=piped, force_terminal=False))
    quiet.start(campaign)
    quiet.stop()
    assert piped.getvalue() == ""  # logs and pipes keep plain lines


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--agent", "reference", "--budget", "1m"], "missing option --env"),
    (["run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--executor", "slurm"],
     "invalid --executor 'slurm'; allowed: local, ray"),
    (["run", "--env", "counter", "--agent", "reference", "--budget", "1m", "--gpus", "0,x"], "invalid --gpus '0,x'"),
])
def test_run_refuses_bad_scheduler_options_in_one_line(argv: list[str], message: str, db_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main([*argv, "--db", str(db_path)], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not db_path.exists() or rows(db_path, "select count(*) from campaigns") == [(0,)]  # nothing written


def _ended_campaign(db: Path, statuses: list[AttemptStatus]) -> int:
    store = Store(db)
    start = datetime.now(UTC) - timedelta(hours=1)
    with store.session() as session:
        campaign = Campaign(spec={"environments": ["counter"], "agent": {"name": "reference"}, "budget_s": 60,
                                  "backend": "local"}, status=CampaignStatus.INTERRUPTED)
        session.add(campaign)
        session.flush()
        for status in statuses:
            session.add(Attempt(campaign_id=campaign.id, environment="counter", agent="reference", budget_s=60.0,
                                status=status, started_at=start, ended_at=start + timedelta(minutes=1)))
        campaign_id = campaign.id
    store.close()
    return campaign_id


def test_an_interrupted_campaign_is_not_shown_as_done(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After SIGTERM both attempts were `interrupted` and `campaigns show` said `2/2 done`."""
    campaign = _ended_campaign(db_path, [AttemptStatus.INTERRUPTED, AttemptStatus.INTERRUPTED, AttemptStatus.ERROR,
                                         AttemptStatus.DONE])
    code, out, _ = run_main(["campaigns", "show", str(campaign), "--db", str(db_path)], capsys)
    assert code == 0 and "1/4 done, 1 error, 2 interrupted" in out, out
    code, out, _ = run_main(["campaigns", "show", str(campaign), "--json", "--db", str(db_path)], capsys)
    shown = json.loads(out)
    assert (shown["done"], shown["error"], shown["interrupted"]) == (1, 1, 2)
    code, out, _ = run_main(["campaigns", "list", "--json", "--db", str(db_path)], capsys)
    assert json.loads(out)[0]["groups"][0]["interrupted"] == 2


def test_resuming_a_campaign_that_ended_writes_nothing(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib

    campaign = _ended_campaign(db_path, [AttemptStatus.DONE, AttemptStatus.ERROR])
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    code, _, err = run_main(["run", "--resume", str(campaign), "--db", str(db_path)], capsys)
    assert code == 2 and f"campaign {campaign} has nothing to resume" in err, err
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before
