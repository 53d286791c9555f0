"""Resume: a campaign whose harness was SIGKILLed goes on with `rebench run --resume ID`; orphans
are found by their lease heartbeat; `rebench campaigns list|show` read the store alone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rebench.errors import RebenchError
from rebench.scheduler.leases import LeaseBroker
from rebench.scheduler.resume import prepare_resume, recover_orphans
from rebench.store.db import Store, integrity_ok
from rebench.store.models import Attempt, AttemptStatus, Campaign, CampaignStatus, ErrorSource

from .conftest import REPO, run_cli
from .sched_support import replay_script, rows


def _campaign(store: Store, statuses: list[AttemptStatus], started: list[bool]) -> tuple[int, list[int]]:
    with store.session() as session:
        campaign = Campaign(spec={}, status=CampaignStatus.RUNNING)
        session.add(campaign)
        session.flush()
        made = [Attempt(campaign_id=campaign.id, environment="counter", agent="reference", budget_s=60.0, seed=i,
                        status=status, started_at=campaign.created_at if run else None)
                for i, (status, run) in enumerate(zip(statuses, started, strict=True))]
        session.add_all(made)
        session.flush()
        return campaign.id, [a.id for a in made]


def test_an_attempt_with_a_live_lease_elsewhere_is_no_orphan(tmp_path: Path) -> None:
    """The heartbeat decides, not a pid of this host: a campaign on another host keeps its attempts."""
    store = Store(tmp_path / "r.db")
    _, (remote, local_dead) = _campaign(store, [AttemptStatus.RUNNING] * 2, [True, True])
    LeaseBroker(store, host="node-2", pid=99999).try_acquire(remote, [], 0)
    with store.session() as session:  # a row from before leases, of a process that is gone
        session.get_one(Attempt, local_dead).pid = 2**22 + 7
    assert recover_orphans(store) == 1
    assert rows(store.path, "select id, status from attempts order by id") == [
        (remote, "running"), (local_dead, "interrupted")]


def test_resume_requeues_what_never_ran_and_retries_what_was_cut(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    statuses = [AttemptStatus.DONE, AttemptStatus.INTERRUPTED, AttemptStatus.INTERRUPTED, AttemptStatus.QUEUED]
    campaign, (done, cut, never, queued) = _campaign(store, statuses, [True, True, False, False])
    ids = prepare_resume(store, campaign)
    got = rows(store.path, "select id, status, counted, retry_of from attempts order by id")
    retry = got[-1][0]
    assert got == [(done, "done", 1, None), (cut, "interrupted", 0, None), (never, "queued", 1, None),
                   (queued, "queued", 1, None), (retry, "queued", 1, cut)]
    assert ids == [never, queued, retry]
    assert prepare_resume(store, campaign) == ids  # again (a crash before any ran): nothing new is planned


def test_resume_retries_an_infrastructure_failure_whose_retry_was_never_planned(tmp_path: Path) -> None:
    """The harness died between a sandbox failure and planning its retry: resume plans it; a
    failure that was already retried (or a retry that failed again) is left as it is."""
    store = Store(tmp_path / "r.db")
    statuses = [AttemptStatus.ERROR, AttemptStatus.ERROR, AttemptStatus.DONE]
    campaign, (lost, tried, retry) = _campaign(store, statuses, [True, True, True])
    with store.session() as session:
        for attempt_id in (lost, tried):
            session.get_one(Attempt, attempt_id).error_source = ErrorSource.INFRASTRUCTURE
        session.get_one(Attempt, tried).counted = False
        session.get_one(Attempt, retry).retry_of = tried
    (new,) = prepare_resume(store, campaign)
    assert rows(store.path, "select id, counted, retry_of, status from attempts where id in (?, ?)", lost, new) == [
        (lost, 0, None, "error"), (new, 1, lost, "queued")]
    assert rows(store.path, "select counted from attempts where id in (?, ?) order by id", tried, retry) == [(0,), (1,)]


def test_resume_refuses_a_campaign_a_live_process_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    campaign, _ = _campaign(store, [AttemptStatus.QUEUED], [False])
    LeaseBroker(store, pid=os.getppid()).hold_campaign(campaign)
    with pytest.raises(RebenchError, match=f"campaign {campaign} is running in process {os.getppid()}"):
        prepare_resume(store, campaign)
    with pytest.raises(RebenchError, match="no campaign 99"):
        prepare_resume(store, 99)


def _wait_for(db: Path, query: str, deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if rows(db, query)[0][0]:
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {query}")


@pytest.mark.slow
def test_sigkill_mid_attempt_then_resume_counts_each_planned_attempt_once(tmp_path: Path, fixture_envs: Path) -> None:
    """A real `rebench run` (two attempts, one at a time) is SIGKILLed while its first attempt runs,
    after that attempt's score call; `rebench run --resume` ends the campaign with one counted row
    per planned attempt, and the killed try keeps every score event it recorded."""
    db = tmp_path / "r.db"
    Store(db).close()  # migrated before the harness starts: the test polls it
    script = replay_script(tmp_path / "s.yaml", 7, 120)
    args = ["--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--budget", "4s", "-k", "2",
            "--backend", "local", "--db", str(db)]
    env = {**os.environ, "COLUMNS": "200", "REBENCH_ENVIRONMENTS": str(fixture_envs)}
    proc = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "run", *args], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(db, "select count(*) from score_events where kind = 'intermediate'")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert integrity_ok(db)
    (campaign, ), = rows(db, "select id from campaigns")
    killed_scores = rows(db, "select id, attempt_id, kind, raw from score_events order by id")
    assert rows(db, "select id, status from attempts order by id") == [(1, "running"), (2, "queued")]
    assert {s[1] for s in killed_scores} == {1} and ("intermediate", 7.0) in [(s[2], s[3]) for s in killed_scores]

    shown = run_cli("campaigns", "show", str(campaign), "--json", "--db", str(db), env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "orphaned"

    resumed = run_cli("run", "--resume", str(campaign), "--db", str(db), env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    attempts = rows(db, "select id, seed, status, counted, retry_of, error_source from attempts order by id")
    assert attempts[0] == (1, 0, "interrupted", 0, None, ErrorSource.INFRASTRUCTURE.value)
    counted = sorted((seed, status) for _, seed, status, c, _, _ in attempts if c)
    assert counted == [(0, "limit"), (1, "limit")], attempts  # each planned attempt once, by seed
    assert [a[4] for a in attempts if a[4] is not None] == [1]  # one retry, of the killed try
    assert rows(db, "select id, attempt_id, kind, raw from score_events where attempt_id = 1 order by id") == \
        killed_scores
    assert rows(db, "select count(*) from leases where released_at is null") == [(0,)]
    listed = run_cli("campaigns", "list", "--db", str(db), env=env)
    assert listed.returncode == 0 and "done" in listed.stdout and "2/2" in listed.stdout, listed.stdout
    again = run_cli("run", "--resume", "77", "--db", str(db), env=env)
    assert again.returncode == 2 and "no campaign 77" in again.stderr


@pytest.mark.docker
def test_resume_on_docker_removes_the_dead_harness_containers(tmp_path: Path) -> None:
    """A SIGKILLed harness leaves its attempt's container running (with the agent's jobs on the
    GPUs its lease no longer holds): resume removes it before the retry starts."""
    from rebench.sandbox.docker import LABEL_OWNER

    from .docker_support import base_image, docker_engine

    engine = docker_engine()
    image = base_image(engine)
    dead_owner = f"{socket.gethostname()}:999999999:1"
    orphan = engine.client.containers.run(image, ["sleep", "300"], detach=True,
                                          labels={"rebench.attempt": "1", LABEL_OWNER: dead_owner})
    try:
        store = Store(tmp_path / "r.db")
        campaign, _ = _campaign(store, [AttemptStatus.RUNNING], [True])
        with store.session() as session:
            session.get_one(Campaign, campaign).spec = {"backend": "docker"}
        prepare_resume(store, campaign)
        assert orphan.id not in [c[0] for c in engine.containers()]
    finally:
        engine.remove_container(orphan.id)
