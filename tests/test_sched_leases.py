"""Durable GPU leases: rows taken in one transaction, beaten, released, and reclaimed from the dead.

There is no GPU here: a fake inventory (REBENCH_FAKE_GPUS) stands in for nvidia-smi; the
leases, the store and the harness processes are real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy import update

from rebench.errors import RebenchError
from rebench.gpus import gpu_ids, parse_gpus
from rebench.scheduler.leases import PRIORITY_HUMAN, Lease, LeaseBroker, active_leases
from rebench.store.db import Store
from rebench.store.models import Attempt, AttemptStatus, Campaign

from .sched_support import add_gpu_profile, replay_script, rows, when


def _attempts(store: Store, n: int) -> list[int]:
    with store.session() as session:
        made = [Attempt(environment="counter", agent="reference", budget_s=60.0, status=AttemptStatus.QUEUED)
                for _ in range(n)]
        session.add_all(made)
        session.flush()
        return [a.id for a in made]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_two_holders_never_get_the_same_device(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    a1, a2, a3 = _attempts(store, 3)
    one = LeaseBroker(store, pid=os.getpid())
    other = LeaseBroker(store, pid=os.getppid())  # another live process of this host
    assert one.try_acquire(a1, [0, 1], 1) == [0]
    assert other.try_acquire(a2, [0, 1], 1) == [1]
    assert one.try_acquire(a3, [0, 1], 1) is None  # both held: nothing written
    assert sorted((lease.kind, lease.device) for lease in active_leases(store)) == [
        ("attempt", None), ("attempt", None), ("gpu", 0), ("gpu", 1)]
    one.release_attempt(a1)
    assert other.try_acquire(a3, [0, 1], 1) == [0]


def test_the_database_refuses_a_second_unreleased_lease_of_a_device(tmp_path: Path) -> None:
    """The guarantee does not rest on the broker's reading: the unique index refuses the row
    (of a device, and of a campaign's runner)."""
    store = Store(tmp_path / "r.db")
    (a1,) = _attempts(store, 1)
    broker = LeaseBroker(store)
    broker.try_acquire(a1, [3], 1)
    with pytest.raises(Exception, match="UNIQUE"), store.session() as session:
        session.add(broker._new("gpu", device=3, attempt_id=a1))
        session.flush()
    with store.session() as session:
        campaign = Campaign(spec={})
        session.add(campaign)
        session.flush()
        campaign_id = campaign.id
    broker.hold_campaign(campaign_id)
    racer = LeaseBroker(store, pid=os.getppid())
    racer._active = lambda session, *kinds: []  # type: ignore[method-assign]  # it looked before the other wrote
    with pytest.raises(RebenchError, match=f"campaign {campaign_id} was just taken by another process"):
        racer.hold_campaign(campaign_id)


def test_a_dead_holder_is_reclaimed_after_the_heartbeat_timeout(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    a1, a2 = _attempts(store, 2)
    elsewhere = LeaseBroker(store, host="node-7", pid=4242, timeout_s=30)
    other_there = LeaseBroker(store, host="node-7", pid=4343, timeout_s=30)
    here = LeaseBroker(store, timeout_s=30)
    assert elsewhere.try_acquire(a1, [0], 1) == [0]
    assert here.try_acquire(a2, [0], 1) == [0]  # device 0 of this host is not node-7's device 0
    here.release_attempt(a2)
    # node-7's pids cannot be checked from node-7's neighbour either: only the heartbeat tells
    assert other_there.try_acquire(a2, [0], 1) is None
    with store.session() as session:
        session.execute(update(Lease).values(heartbeat_at=datetime.now(UTC) - timedelta(seconds=31)))
    assert other_there.try_acquire(a2, [0], 1) == [0]
    other_there.release_attempt(a2)
    here_dead = LeaseBroker(store, pid=_dead_pid(), timeout_s=30)
    assert here_dead.try_acquire(a1, [5], 1) == [5]
    # a holder of this host whose process is gone is dead at once, heartbeat or not
    assert here.try_acquire(a2, [5], 1) == [5]
    reasons = rows(store.path, "select device, release_reason from leases where kind = 'gpu' "
                   "and release_reason like 'reclaimed%' order by id")
    assert reasons[0][0] == 0 and "node-7:4242 is dead" in str(reasons[0][1])
    assert reasons[1][0] == 5 and "is dead" in str(reasons[1][1])


def test_heartbeat_thread_keeps_a_holder_alive(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    (a1,) = _attempts(store, 1)
    broker = LeaseBroker(store, timeout_s=0.6)
    with broker.heartbeat():
        broker.try_acquire(a1, [0], 1)
        time.sleep(1.0)
        assert LeaseBroker(store, pid=os.getppid(), timeout_s=0.6).free_devices([0]) == []
    time.sleep(0.8)  # no beats any more: stale
    assert LeaseBroker(store, pid=os.getppid(), timeout_s=0.6).free_devices([0]) == [0]


def test_a_waiting_human_claim_comes_before_agents(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    a1, a2 = _attempts(store, 2)
    human = LeaseBroker(store, pid=os.getppid())
    agents = LeaseBroker(store)
    claim = human.claim(1, priority=PRIORITY_HUMAN)
    assert agents.free_devices([0, 1]) == [0]
    assert agents.try_acquire(a1, [0, 1], 2) is None  # one of the two is the human's
    assert agents.try_acquire(a1, [0, 1], 1) == [0]
    assert agents.try_acquire(a2, [0, 1], 1) is None
    assert human.try_acquire(a2, [0, 1], 1, priority=PRIORITY_HUMAN) == [1]
    human.withdraw(claim)
    assert [lease.kind for lease in active_leases(store)].count("request") == 0


def test_inventory_all_and_bad_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REBENCH_FAKE_GPUS", "4")
    assert gpu_ids() == [0, 1, 2, 3] and parse_gpus("all") == [0, 1, 2, 3]
    monkeypatch.setenv("REBENCH_FAKE_GPUS", "0,2")
    assert parse_gpus("ALL") == [0, 2] and parse_gpus("1,3") == [1, 3]
    with pytest.raises(RebenchError, match="invalid --gpus 'x'"):
        parse_gpus("x")


@pytest.mark.slow
def test_two_concurrent_runs_never_hold_the_same_gpu(tmp_path: Path, fixture_envs: Path) -> None:
    """Two real `rebench run` processes on one database, both given GPUs 0 and 1 (`--gpus 0,1`,
    and `--gpus all` of a fake inventory of two), each with three 1-GPU attempts that can run side
    by side: the lease rows show every device held by one attempt at a time, and both processes
    had to share the devices."""
    add_gpu_profile(fixture_envs)
    db = tmp_path / "r.db"
    Store(db).close()
    script = replay_script(tmp_path / "s.yaml", 5, 1.5)
    env = {"REBENCH_FAKE_GPUS": "2", "REBENCH_ENVIRONMENTS": str(fixture_envs)}
    args = ["run", "--env", "counter", "--profile", "gpu", "--agent", "replay", "--agent-arg", f"script={script}",
            "--budget", "1m", "-k", "3", "--parallel", "3", "--backend", "local", "--db", str(db)]
    full = {**os.environ, **env, "COLUMNS": "200"}
    # built first: two processes building the same environment's virtualenv at once may collide
    built = subprocess.run([sys.executable, "-m", "rebench.cli.app", "envs", "build", "counter", "--profile", "gpu",
                            "--backend", "local"], env=full, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    procs = [subprocess.Popen([sys.executable, "-m", "rebench.cli.app", *args, "--gpus", gpus], env=full, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for gpus in ("0,1", "all")]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outputs]
    assert rows(db, "select status, count(*) from attempts group by status") == [("done", 6)]
    # the attempts themselves: never more running at once than the two devices, over both processes
    spans = rows(db, "select started_at, ended_at from attempts")
    assert _peak([(when(a), when(b)) for a, b in spans]) == 2
    leases = rows(db, "select device, holder_pid, acquired_at, released_at from leases where kind = 'gpu'")
    assert len(leases) == 6 and all(r[3] is not None for r in leases)
    for device in (0, 1):
        held = sorted((when(a), when(r)) for d, _, a, r in leases if d == device)
        assert all(end <= start for (_, end), (start, _) in pairwise(held)), held
    assert len({pid for _, pid, _, _ in leases}) == 2  # both processes got devices
    # each sandbox saw its leased device and no other
    leased = dict(rows(db, "select attempt_id, device from leases where kind = 'gpu'"))
    seen = {a: json.loads(str(d))["stdout"].strip() for a, d in rows(db, "select attempt_id, data from events "
                                                                          "where kind = 'bash'")}
    assert seen == {a: f"gpus={d}" for a, d in leased.items()}, (seen, leased)


def _peak(spans: list[tuple[datetime, datetime]]) -> int:
    running = peak = 0
    for _, step in sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans]):
        running += step
        peak = max(peak, running)
    return peak
