"""The Ray executor on a real multi-node Ray cluster on this machine: a head node that runs no
attempts and worker nodes with one CPU each and small object stores (2 cores here). The
`rebench run` process is the Ray driver and the only writer of its database; attempts run as
Ray tasks on the worker nodes (local sandbox backend: the nodes share this machine)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rebench.store.db import Store

from .conftest import REPO, run_cli
from .sched_support import replay_script, rows

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024**2}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    started = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": 80 * 1024**2, "include_dashboard": False})
    try:
        started.add_node(**NODE)
        yield started
    finally:
        started.shutdown()


def _run(db: Path, envs: Path, *extra: str, budget: str = "1m", agent: tuple[str, ...] = ("--agent", "reference")
         ) -> list[str]:
    return ["run", "--env", "counter", *agent, "--budget", budget, "-k", "2", "--backend", "local",
            "--db", str(db), *extra]


COLUMNS = "environment, seed, status, error_source, counted, retry_of, final_raw, final_normalized, submitted"


def test_a_campaign_on_ray_gives_the_rows_of_the_local_executor(cluster: Any, fixture_envs: Path,
                                                                tmp_path: Path) -> None:
    local, remote = tmp_path / "local.db", tmp_path / "ray.db"
    done = run_cli(*_run(local, fixture_envs))
    assert done.returncode == 0, done.stderr[-2000:]
    on_ray = run_cli(*_run(remote, fixture_envs, "--executor", "ray", "--ray-address", cluster.address), timeout=300)
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "ran on Ray node" in on_ray.stdout
    attempts = f"select {COLUMNS} from attempts order by id"
    assert rows(remote, attempts) == rows(local, attempts)
    assert [r[2] for r in rows(remote, attempts)] == ["done", "done"]
    scores = "select attempt_id, kind, raw, valid from score_events order by id"
    assert rows(remote, scores) == rows(local, scores)
    # but the note of the node each attempt ran on (rebench.scheduler.ray_worker)
    events = "select attempt_id, seq, kind from events where data not like '%ray_node%' order by attempt_id, seq"
    assert rows(remote, events) == rows(local, events)
    pauses = "select attempt_id, reason, end_s is not null from pauses order by id"
    assert rows(remote, pauses) == rows(local, pauses)


def test_a_worker_killed_mid_attempt_is_an_infrastructure_error_retried(cluster: Any, fixture_envs: Path,
                                                                        tmp_path: Path) -> None:
    """The node running the first attempt dies after its score call: that try ends `error`
    (infrastructure), is no longer counted and keeps the score it streamed; its retry runs on a
    new node and counts."""
    db = tmp_path / "ray.db"
    Store(db).close()  # migrated before the harness starts: the test polls it
    script = replay_script(tmp_path / "s.yaml", 7, 120)
    args = ["run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--budget", "5s",
            "-k", "1", "--backend", "local", "--db", str(db), "--executor", "ray", "--ray-address", cluster.address]
    env = {**os.environ, "COLUMNS": "200", "REBENCH_ENVIRONMENTS": str(fixture_envs)}
    proc = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", *args], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not (rows(db, "select count(*) from score_events where kind = 'intermediate'")[0][0]):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr and proc.stderr.read()[-2000:]
            time.sleep(0.1)
        (worker,) = [node for node in cluster.worker_nodes]
        cluster.remove_node(worker)
        cluster.add_node(**NODE)
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    got = rows(db, "select id, status, error_source, counted, retry_of from attempts order by id")
    assert got == [(1, "error", "infrastructure", 0, None), (2, "limit", None, 1, 1)], (got, err[-2000:])
    (message,), = rows(db, "select error_message from attempts where id = 1")
    assert "Ray worker was lost" in str(message)
    assert ("intermediate", 7.0) in rows(db, "select kind, raw from score_events where attempt_id = 1")
    assert rows(db, "select count(*) from leases where released_at is null") == [(0,)]
