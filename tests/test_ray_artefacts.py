"""An attempt's files on a Ray worker reach the head's store, and a worker's attempt is normalized with
its own hardware's anchors, never the head's (rebench.scheduler.ray_artefacts, ray_worker).

The cluster is made as a user makes one (`ray start`, tests/ray_support.py), with each worker node in a
mount namespace of its own where the head's folder (its database and snapshot folder) is an empty
tmpfs: the worker's disk, at the head's paths. (The environments folder and the run's build cache are
seen by all: a worker needs the environment built.) Whatever a worker writes at the head's
paths the head never sees, as on a real cluster. One worker also sees another CPU in /proc/cpuinfo
(a bind mount), so its hardware fingerprint is not the head's. Sandboxes run on the local backend.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.calibration import HardwareFingerprint, hardware_fingerprint
from rebench.export.gateway_calls import BodyFiles
from rebench.scheduler.ray_artefacts import Inbox, Outbox, rebase
from rebench.scoring.rescore import folder_digest
from rebench.store.db import Store
from rebench.store.measurements import Calibration

from .conftest import FIXTURE_ENVS, REPO
from .ray_support import RAY, Node, RayStartCluster, _ports

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray_artefacts")]

FAKE_CPU = "Imaginary CPU 9000 @ 0.5GHz"
TIMED = """
[profiles.timed]
description = "Scores that stand for timings (hardware_dependent), judged by the best score call."
resources = { gpus = 0, cpus = 1, memory_gb = 1 }
direction = "higher"
final_score = "best"
score_timeout_s = 5
hardware_dependent = true
anchors = { start = 0.0, reference = 100.0, source = "declared apart from the solutions' own values (1 and 11)" }
params = { secret_file = "answer.txt" }
"""


@dataclass
class Site:
    base: Path
    head: Path
    envs: Path
    node_tmp: list[Path]
    cluster: RayStartCluster

    def env(self) -> dict[str, str]:
        return self.cluster.env(REBENCH_ENVIRONMENTS=str(self.envs), COLUMNS="200")

    def rebench(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rebench.cli.app", *args], env=self.env(), cwd=REPO, text=True,
                              capture_output=True, timeout=timeout)


def add_hidden_worker(cluster: RayStartCluster, hide: Path, tmp: Path, cpuinfo: Path | None = None) -> Node:
    """A worker node (1 CPU) whose view of `hide` is an empty tmpfs, with TMPDIR `tmp`."""
    mounts = [f"mount -t tmpfs tmpfs {shlex.quote(str(hide))}"]
    if cpuinfo is not None:
        mounts.append(f"mount --bind {shlex.quote(str(cpuinfo))} /proc/cpuinfo")
    script = " && ".join([*mounts, 'exec "$@"'])
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", RAY, "start", "--block",
               "--temp-dir", str(cluster.temp), *_ports(), "--address", cluster.address, "--num-cpus", "1",
               "--object-store-memory", str(80 * 1024**2)]
    env = cluster.env(RAY_AUTH_MODE="token", RAY_gcs_rpc_server_reconnect_timeout_s="5", TMPDIR=str(tmp))
    env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}  # a node has no model keys of its own
    log = cluster.temp / f"hidden{len(cluster.nodes)}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    node = Node(proc, log)
    cluster.nodes.append(node)
    cluster._wait_for(sum(1 for n in cluster.nodes if n.alive()))
    return node


@contextlib.contextmanager
def hidden_site(base: Path) -> Iterator[Site]:
    """The head's folder, the fixture environments, and a cluster of a head and two hidden workers
    (the second with FAKE_CPU)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for the workers' own mount namespaces")
    head, envs = base / "head", base / "envs"
    head.mkdir()
    shutil.copytree(FIXTURE_ENVS, envs)
    with (envs / "counter" / "environment.toml").open("a") as toml:
        toml.write(TIMED)
    cpuinfo = base / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: {FAKE_CPU}\n\n")
    node_tmp = [base / "node1", base / "node2"]
    for folder in node_tmp:
        folder.mkdir()
    cluster = RayStartCluster(base / "home")
    try:
        cluster.start_head()
        add_hidden_worker(cluster, head, node_tmp[0])
        add_hidden_worker(cluster, head, node_tmp[1], cpuinfo)
        yield Site(base, head, envs, node_tmp, cluster)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with hidden_site(tmp_path_factory.mktemp("rayart")) as made:
        yield made


def rows(db: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def script(path: Path, actions: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"actions": actions}))
    return path


def campaign(site: Site, db: Path, profile: str, actions: list[dict[str, Any]], *extra: str, k: int = 2,
             calibrate: bool = False) -> subprocess.CompletedProcess[str]:
    plan = script(site.base / f"{db.stem}.yaml", actions)  # the agent's files are not the head's: the workers see them
    return site.rebench("run", "--env", "counter", "--profile", profile, "--agent", "replay", "--agent-arg",
                        f"script={plan}", "--budget", "1m", "-k", str(k), "--parallel", "2", "--backend", "local",
                        "--calibrate" if calibrate else "--no-calibrate", "--db", str(db), "--executor", "ray",
                        "--ray-address", site.cluster.address, *extra)


def where_they_ran(db: Path) -> dict[int, dict[str, Any]]:
    """Each attempt's note of its node, hardware and anchors (the last event of an attempt on Ray)."""
    notes = {attempt: json.loads(data)["data"] for attempt, data in rows(
        db, "select attempt_id, data from events where kind = 'note' and data like '%ray_node%'")}
    last = dict(rows(db, "select attempt_id, max(seq) from events group by attempt_id"))
    assert all(rows(db, f"select 1 from events where attempt_id = {a} and seq = {last[a]} and data like '%ray_node%'")
               for a in notes)
    return notes


def test_attempts_use_their_own_nodes_hardware_anchors_never_the_heads(site: Site) -> None:
    """Two attempts at once, one on each worker: the worker whose CPU is the head's uses the head's
    machine type's calibration; the one with another CPU uses the declared anchors, although the head
    has calibrations (its own and another machine's). Each attempt's record names its node, hardware and
    anchors."""
    db = site.head / "anchors.db"
    own = hardware_fingerprint()
    description = f"{FAKE_CPU} x{os.cpu_count()} ({platform.machine()})"
    other = HardwareFingerprint(key=hashlib.sha256(description.encode()).hexdigest()[:12],
                                description=description)
    with contextlib.closing(Store(db)) as store, store.session() as session:
        for key, start, reference in ((own.key, 2.0, 12.0), ("0123456789ab", 0.0, 100.0)):
            session.add(Calibration(environment="counter", env_version="1.0.0", profile="tiny", hardware=key,
                                    hardware_description="the head's" if key == own.key else "another machine",
                                    start_raw=start, reference_raw=reference))
    done = campaign(site, db, "tiny", [{"write_file": {"path": "value.txt", "content": "7"}}, {"score": {}},
                                       {"sleep": 4}])  # both run at once: one per node (1 CPU each)
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows(db, "select status from attempts") == [("done",), ("done",)], rows(db, "select * from attempts")
    starts = where_they_ran(db)
    assert len({data["ray_node"] for data in starts.values()}) == 2, starts
    by_hardware = {data["hardware"]: attempt for attempt, data in starts.items()}
    assert set(by_hardware) == {own.key, other.key}, starts
    anchors = {attempt: (kind, normalized) for attempt, kind, normalized in
               rows(db, "select id, anchors_kind, final_normalized from attempts")}
    assert anchors[by_hardware[own.key]] == ("calibrated", pytest.approx(0.5))  # (7 - 2) / (12 - 2)
    assert anchors[by_hardware[other.key]] == ("declared", pytest.approx(0.6))  # (7 - 1) / (11 - 1)
    assert starts[by_hardware[other.key]]["hardware_description"] == description
    assert {data["anchors_kind"] for data in starts.values()} == {"calibrated", "declared"}


def test_a_node_calibrates_a_timing_environment_before_its_first_attempt_and_the_head_keeps_the_row(
        site: Site) -> None:
    """A timing profile (`hardware_dependent`) with calibration on: the head measures nothing (its own
    machine type's row, put there before, serves the worker of that CPU); the worker of another CPU
    measures its own anchors before its first attempt, once in the campaign run however many of its
    attempts run, normalizes with them (the declared 0..100 would give 0.07) and the head's database
    keeps that row, which a later campaign run on that database uses without measuring again."""
    db = site.head / "timed.db"
    own = hardware_fingerprint()
    description = f"{FAKE_CPU} x{os.cpu_count()} ({platform.machine()})"
    other = hashlib.sha256(description.encode()).hexdigest()[:12]
    with contextlib.closing(Store(db)) as store, store.session() as session:
        session.add(Calibration(environment="counter", env_version="1.0.0", profile="timed", hardware=own.key,
                                hardware_description="the head's", start_raw=2.0, reference_raw=12.0))
    actions = [{"write_file": {"path": "value.txt", "content": "7"}}, {"score": {}}, {"sleep": 3}]
    done = campaign(site, db, "timed", actions, k=3, calibrate=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "calibrating counter on Ray node" in done.stdout + done.stderr
    assert rows(db, "select status from attempts") == [("done",)] * 3
    calibrations = rows(db, "select hardware, hardware_description, start_raw, reference_raw from calibrations "
                            "order by id")
    assert calibrations == [(own.key, "the head's", 2.0, 12.0), (other, description, 1.0, 11.0)], calibrations
    ran = where_they_ran(db)
    anchors = dict(((a, (kind, normalized)) for a, kind, normalized in
                    rows(db, "select id, anchors_kind, final_normalized from attempts")))
    on_other = [a for a, data in ran.items() if data["hardware"] == other]
    assert on_other and len(on_other) < 3, ran  # both nodes ran attempts (two at once, one CPU each)
    for attempt, data in ran.items():
        if data["hardware"] == other:
            assert anchors[attempt] == ("calibrated", pytest.approx(0.6)), anchors  # (7 - 1) / (11 - 1)
        else:
            assert anchors[attempt] == ("calibrated", pytest.approx(0.5)), anchors  # (7 - 2) / (12 - 2)
            assert not data["calibrated_on_node"]
    assert all(ran[a]["calibrated_on_node"] for a in on_other), ran

    again = campaign(site, db, "timed", actions, k=2, calibrate=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(rows(db, "select id from calibrations")) == 2  # nothing measured again
    later = {a: data for a, data in where_they_ran(db).items() if a > 3}
    assert later and not any(data["calibrated_on_node"] for data in later.values()), later
    assert {kind for a, kind in rows(db, "select id, anchors_kind from attempts where id > 3")} == {"calibrated"}


def test_a_model_agent_on_a_worker_without_keys_uses_the_heads_key(site: Site, tmp_path: Path) -> None:
    """The modular agent against the fake provider on 127.0.0.1, the provider key only in the
    environment of `rebench run` (the worker nodes have none): the key reaches the node with the
    task, the agent's calls carry it, and the attempt runs as it would locally, its calls priced by the
    head's price table (a file the workers cannot see). The agent's commands
    still start with a clean environment: its `env` output (in the records) has no key."""
    from tests.fake_model_server import FakeModelServer
    from tests.model_fixtures import ANTHROPIC_TEST_KEY, TEST_PRICES, call

    db = site.head / "model.db"
    prices = site.head / "prices.toml"  # the head's disk: the workers see an empty folder there
    prices.write_text(TEST_PRICES)
    with FakeModelServer(require_key=ANTHROPIC_TEST_KEY) as server:
        server.add({"tool_calls": [call("bash", command="echo 7 > value.txt && env")]}, {"tool_calls": [call("score")]},
                   {"tool_calls": [call("submit")]})
        done = subprocess.run(
            [sys.executable, "-m", "rebench.cli.app", "run", "--env", "counter", "--profile", "tiny",
             "--agent", "modular", "--model", "anthropic/scripted", "--base-url", server.url, "--budget", "1m",
             "-k", "1", "--backend", "local", "--db", str(db), "--executor", "ray",
             "--ray-address", site.cluster.address],
            env={**site.env(), "ANTHROPIC_API_KEY": ANTHROPIC_TEST_KEY, "REBENCH_PRICES": str(prices)}, cwd=REPO,
            text=True, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert rows(db, "select status, submitted, final_raw from attempts") == [("done", 1, 7.0)], done.stdout
        assert len(server.requests) == 3
        given = [r.headers.get("x-api-key") or r.headers.get("authorization", "").removeprefix("Bearer ")
                 for r in server.requests]
        assert given == [ANTHROPIC_TEST_KEY] * 3
    assert len(where_they_ran(db)) == 1
    assert rows(db, "select count(*) from events where kind = 'model_call'") == [(3,)]
    (tokens_in, tokens_out, cost), = rows(db, "select input_tokens, output_tokens, cost_usd from attempts")
    assert tokens_in > 0 and cost == pytest.approx((tokens_in * 1000 + tokens_out * 2000) / 1e6)  # the head's table
    assert not rows(db, f"select id from events where data like '%{ANTHROPIC_TEST_KEY}%'")


def test_snapshots_reach_the_head_and_rescore_export_and_view_find_them_with_the_workers_folders_gone(
        site: Site) -> None:
    """Snapshots at score calls and the final one, under re-scoring, on hidden workers: the head holds
    them, byte for byte (their recorded digests), at the paths its rows name; the workers' folders are
    gone, and `rebench rescore`, `rebench export inspect` and `rebench view`'s export work on the head."""
    db = site.head / "files.db"
    big = "5\n" + "#" * (9 * 2**20)  # more than two batches' worth
    done = campaign(site, db, "rescore", [
        {"write_file": {"path": "value.txt", "content": "5"}}, {"score": {}},
        {"write_file": {"path": "big.txt", "content": big}},
        {"write_file": {"path": "value.txt", "content": "7"}}, {"score": {}}])
    assert done.returncode == 0, done.stderr[-3000:]
    assert rows(db, "select status from attempts") == [("done",), ("done",)]
    snapshots = site.head / "files.db-snapshots"
    for attempt_id, path in rows(db, "select id, snapshot_path from attempts"):
        assert path == str(snapshots / f"attempt-{attempt_id}" / "final"), path
        assert (Path(path) / "value.txt").read_text() == "7"
        assert (Path(path) / "big.txt").read_text() == big
    taken = [json.loads(data) for (data,) in rows(db, "select data from events where kind = 'snapshot'")]
    at_calls = [d for d in taken if d.get("score_id") is not None]
    assert len(at_calls) == 4 and all(d.get("sha256") for d in at_calls), taken
    for data in at_calls:
        assert data["path"].startswith(str(snapshots) + "/"), data
        assert folder_digest(Path(data["path"])) == data["sha256"]
    worker_paths = rows(db, "select count(*) from events where data like '%rebench-ray-%'")
    assert worker_paths == [(0,)]
    assert not list(snapshots.glob(".rebench-incoming-*"))

    for folder in site.node_tmp:
        assert not list(folder.glob("rebench-ray-*")), list(folder.iterdir())  # the worker cleaned up
        shutil.rmtree(folder)
        folder.mkdir()
    rescored = site.rebench("rescore", "--campaign", "1", "--backend", "local", "--db", str(db), "--json")
    assert rescored.returncode == 0, rescored.stderr[-3000:]
    outcome = json.loads(rescored.stdout)
    assert sorted(outcome["rescored"]) == ["1", "2"] and not outcome["skipped"], outcome

    exported = site.rebench("export", "inspect", "--db", str(db), "--out", str(site.base / "logs"), "--json")
    assert exported.returncode == 0, exported.stderr[-3000:]
    logs = json.loads(exported.stdout)["logs"]
    assert sorted(a for log in logs for a in log["attempts"]) == [1, 2]

    from rebench.cli.view import view_folder
    from rebench.export.inspect_log import export_inspect

    with contextlib.closing(Store(db)) as store:
        viewed = export_inspect(store, view_folder(db))
    assert sorted(a for log in viewed.logs for a in log.attempts) == [1, 2]


def test_body_files_and_session_logs_come_over_whole_and_the_export_reads_them_on_the_head(tmp_path: Path) -> None:
    """An installed agent's folder beside its snapshot (model-call bodies, its session logs), sent by a
    worker's outbox in 4 MiB items and written by the head's inbox: the head's export reader finds each
    body at the path the rebased event names. (An installed agent needs its Docker image built from npm,
    too slow for this file; the transfer is the one the cluster test above runs.)"""
    worker, head = tmp_path / "worker" / "snapshots", tmp_path / "head" / "db-snapshots"
    calls = worker / "attempt-3.2-agent" / "model-calls"
    calls.mkdir(parents=True)
    body = {"endpoint": "/v1/messages", "status": 200, "request": {"model": "m", "messages": []},
            "response": {"pad": "x" * (5 * 2**20)}}
    (calls / "0001.json").write_text(json.dumps(body))
    logs = worker / "attempt-3.2-agent" / "claude_projects" / "p"
    logs.mkdir(parents=True)
    (logs / "session.jsonl").write_text('{"type": "user"}\n')
    outbox, inbox = Outbox(worker), Inbox(head, ("attempt-3.2", "attempt-3.2-agent"))
    outbox.scan(final=True)
    items = 0
    while outbox.pending():
        batch = outbox.take()
        assert sum(len(i.get("data", b"")) for i in batch) <= 4 * 2**20
        inbox.apply(batch)
        items += 1
    inbox.close()
    assert items >= 2 and inbox.refused == []
    event = rebase({"extra": {"body_file": str(calls / "0001.json")}}, str(worker), str(head))
    found, why = BodyFiles(head, 3, str(head / "attempt-3.2" / "final")).read(event["extra"]["body_file"])
    assert why is None and found == body
    assert (head / "attempt-3.2-agent" / "claude_projects" / "p" / "session.jsonl").read_text() == '{"type": "user"}\n'
    assert [p.name for p in head.iterdir()] == ["attempt-3.2-agent"]  # no staging folder left
