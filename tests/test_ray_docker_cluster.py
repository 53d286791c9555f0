"""The Ray executor with the Docker backend on a cluster made as a user makes one (tests/ray_support.py):
a head with no CPUs and two `ray start` worker nodes of one CPU each, each with a rebench cache folder
of its own (REBENCH_CACHE of its `ray start`), all on this machine and its one Docker engine. Every
campaign is the real `rebench run` in a subprocess, the head's harness the only writer of its database.

The module shares one cluster; a test that loses a node adds a new one, so each starts with two.
The environments are copies of the fixtures under names of their own, so the containers a test
counts are its attempts' only."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.adversarial.test_scoring_integrity import assert_nothing_protected_left, background

from .conftest import FIXTURE_ENVS, REPO
from .docker_support import base_image, docker_engine
from .ray_support import Node, RayStartCluster
from .sched_support import replay_script, rows

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.xdist_group("ray_docker_cluster")]

COUNTER, GATEWAY = "ray_docker_counter", "ray_docker_gateway"
ATTEMPTS = "select id, status, error_source, counted, retry_of from attempts order by id"
ORPHAN = "ray_docker_orphan"
MAKE_ORPHAN = """
import sys, time
from rebench.sandbox.base import SandboxSpec
from rebench.sandbox.docker import DockerEngine
from rebench.sandbox.docker.container import create_container
spec = SandboxSpec(attempt_id=int(sys.argv[1]), environment=sys.argv[2], profile="tiny", image=sys.argv[3],
                   cpus=1.0, memory_gb=1.0)
create_container(DockerEngine.connect(), spec, gate_dir=None, network=None, shm_bytes=64 << 20)
print("made", flush=True)
time.sleep(600)
"""
"""What a harness does first for an attempt on Docker: make its container (labelled with this process as
its owner); the test SIGKILLs it before it starts the container, as a lost node's worker can be."""


@dataclass
class Site:
    root: Path
    envs: Path
    cluster: RayStartCluster
    caches: dict[int, Path] = field(default_factory=dict)
    """A worker node's `ray start` pid -> its REBENCH_CACHE."""

    def add_worker(self) -> Node:
        cache = self.root / f"node-cache-{len(self.cluster.nodes)}"
        node = self.cluster.add_worker(cpus=1, REBENCH_CACHE=str(cache))
        self.caches[node.proc.pid] = cache
        return node

    def workers(self) -> list[Node]:
        return [node for node in self.cluster.nodes[1:] if node.alive()]

    def env(self, **extra: str) -> dict[str, str]:
        """The head's shell: the user's home (Ray's token), the environments, the head's own cache."""
        return self.cluster.env(REBENCH_ENVIRONMENTS=str(self.envs), COLUMNS="200", **extra)

    def run(self, env_name: str, db: Path, *args: str, ray: bool = True) -> list[str]:
        executor = ["--executor", "ray", "--ray-address", self.cluster.address] if ray else []
        return [sys.executable, "-m", "rebench.cli.app", "run", "--env", env_name, "--backend", "docker",
                "--db", str(db), *executor, *args]

    def marks(self, node: Node) -> list[str]:
        """The Ray node ids whose first Docker attempt reaped, in that node's own cache."""
        folder = self.caches[node.proc.pid] / "ray-nodes"
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _copy(source: Path, envs: Path, name: str) -> None:
    shutil.copytree(source, envs / name)
    toml = envs / name / "environment.toml"
    text = toml.read_text()
    toml.write_text(re.sub(r'^name = "[^"]+"', f'name = "{name}"', text, count=1, flags=re.M))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base_image(docker_engine())
    root = tmp_path_factory.mktemp("ray-docker")
    envs = root / "envs"
    _copy(FIXTURE_ENVS / "counter", envs, COUNTER)
    _copy(FIXTURE_ENVS / "gateway_echo", envs, GATEWAY)
    shutil.copytree(FIXTURE_ENVS.parent / "docker_envs" / "vault", envs / "vault")
    cluster = RayStartCluster(root / "home")
    made = Site(root, envs, cluster)
    try:
        cluster.start_head()
        made.add_worker()
        made.add_worker()
        yield made
    finally:
        cluster.stop()
        shutil.rmtree(cluster.temp, ignore_errors=True)


@pytest.fixture
def two_workers(site: Site) -> Site:
    while len(site.workers()) < 2:
        site.add_worker()
    return site


def _containers(name: str) -> list[tuple[str, dict[str, str]]]:
    return [(c[1], c[3]) for c in docker_engine().containers() if c[3].get("rebench.environment") == name]


def _node_of(site: Site, container_labels: dict[str, str]) -> Node:
    """The worker node whose process owns the container (its owner's session is the node's)."""
    sid = os.getsid(int(container_labels["rebench.owner"].split(":")[1]))
    (node,) = [n for n in site.workers() if n.proc.pid == sid]
    return node


def _wait(what: str, done: object, proc: subprocess.Popen[str] | None = None, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not (done() if callable(done) else done):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the campaign ended before {what}: {proc.stderr and proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _scored(db: Path, count: int) -> bool:
    return db.exists() and rows(db, "select count(*) from score_events where kind = 'intermediate'") == [(count,)]


def _nodes_ran(stdout: str) -> list[str]:
    return re.findall(r"ran on Ray node (\w+)", stdout)


ASK = r"""
import json, os, urllib.request
env = dict(line.strip().split("=", 1) for line in open(os.path.join(os.environ["REBENCH_HOME"], "api.env")))
for i in range(3):
    body = json.dumps({"model": env["REBENCH_GATEWAY_MODEL"], "messages": [{"role": "user", "content": f"q{i}"}]})
    request = urllib.request.Request(env["OPENAI_BASE_URL"] + "/chat/completions", data=body.encode(),
                                     headers={"Authorization": "Bearer " + env["OPENAI_API_KEY"]})
    with urllib.request.urlopen(request, timeout=20) as response:
        answer = json.loads(response.read())["choices"][0]["message"]["content"]
open("answer.txt", "w").write(answer)
"""
COMPARED = {
    "attempts": "select environment, agent, seed, status, error_source, counted, retry_of, final_raw, "
                "final_normalized, submitted, backend from attempts order by id",
    "score_events": "select attempt_id, kind, raw, valid from score_events order by attempt_id, id",
    # but the note naming the node each attempt ran on, which only Ray writes (asserted apart)
    "events": "select attempt_id, seq, kind from events where data not like '%ray_node%' order by attempt_id, seq",
    "pauses": "select attempt_id, reason, end_s is not null from pauses order by attempt_id, id",
    "gateway_requests": "select attempt_id, meter, model, endpoint, status, input_tokens, output_tokens, cost_usd, "
                        "error from gateway_requests order by attempt_id, id",
}


def test_a_campaign_on_two_worker_nodes_gives_the_rows_of_the_local_executor(two_workers: Site, tmp_path: Path
                                                                             ) -> None:
    """Two attempts whose agent and scorer call the environment's model through its gateway, one on
    each worker node (one CPU each): every row the local executor writes, Ray writes alike. Each node
    used its own cache folder (its first Docker attempt's reap mark is there, under its node id)."""
    site = two_workers
    script = tmp_path / "ask.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"python": ASK}, {"score": {}}, {"submit": None}]}))
    agent = ("--agent", "replay", "--agent-arg", f"script={script}", "--budget", "2m", "-k", "2", "--parallel", "2")
    local, remote = tmp_path / "local.db", tmp_path / "ray.db"
    built = subprocess.run([sys.executable, "-m", "rebench.cli.app", "envs", "build", GATEWAY, "--backend", "docker"],
                           env=site.env(), cwd=REPO, text=True, capture_output=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    on_ray = subprocess.Popen(site.run(GATEWAY, remote, *agent), env=site.env(), cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    here = subprocess.run(site.run(GATEWAY, local, *agent, ray=False), env=site.env(), cwd=REPO, text=True,
                          capture_output=True, timeout=300)
    out, err = on_ray.communicate(timeout=300)
    assert here.returncode == 0, here.stderr[-3000:]
    assert on_ray.returncode == 0, err[-3000:]
    for table, query in COMPARED.items():
        assert rows(remote, query) == rows(local, query), table
    assert rows(remote, "select status, counted, final_raw from attempts") == [("done", 1, 1.0)] * 2
    assert rows(remote, "select attempt_id, count(*) from events where kind = 'note' and data like '%ray_node%' "
                        "group by attempt_id") == [(1, 1), (2, 1)]
    calls = {str(meter): int(str(count)) for meter, count in rows(
        remote, "select meter, count(*) from gateway_requests where status = 200 group by meter")}
    assert calls["agent"] == 6 and calls["scorer"] >= 2, calls  # 3 calls of each agent, 1+ of each scorer
    ran = _nodes_ran(out)
    assert len(ran) == 2 and len(set(ran)) == 2, out[-2000:]  # one attempt on each worker node
    marks = {node.proc.pid: site.marks(node) for node in site.workers()}
    assert all(len(m) == 1 for m in marks.values()), marks
    assert sorted(m[0][:len(ran[0])] for m in marks.values()) == sorted(ran)
    assert _containers(GATEWAY) == []


def test_a_hostile_agent_on_a_worker_node_still_cannot_rewrite_the_result_file(two_workers: Site, tmp_path: Path
                                                                               ) -> None:
    """tests/adversarial/test_scoring_integrity.py's racer (a daemon that tries to swap the scorer's
    result file for one of its own), run on a worker node: it fails there as on the head."""
    site = two_workers
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        *background("race"), {"score": {}}, {"bash": "sleep 1"}, {"submit": None}]}))
    db = tmp_path / "rebench.db"
    done = subprocess.run(site.run("vault", db, "--agent", "replay", "--agent-arg", f"script={script}", "--profile",
                                   "tiny", "--budget", "3m"), env=site.env(), cwd=REPO, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert len(_nodes_ran(done.stdout)) == 1
    (snapshot_path, final_raw), = rows(db, "select snapshot_path, final_raw from attempts")
    snapshot = Path(str(snapshot_path))
    log = (snapshot / "attack.log").read_text()
    assert "waiting" in log  # the attacker ran
    assert "forged" not in log and "holding" not in log, log
    scores = [float(str(raw)) for (raw,) in rows(db, "select raw from score_events where kind = 'intermediate'")]
    assert scores and max(scores) == 0.0 and final_raw == 0.0
    assert_nothing_protected_left(snapshot, db)


def test_a_worker_node_killed_mid_attempt_is_retried_on_the_other_and_counted_once(two_workers: Site,
                                                                                   tmp_path: Path) -> None:
    """Both attempts have scored, one on each node, when attempt 1's node is SIGKILLed whole (its Ray
    worker too, so the attempt's own cleanup never runs): that try ends `error` (infrastructure),
    uncounted, keeping the score it streamed; its container is gone; the other node's attempt runs
    on undisturbed; the retry runs on a live node; exactly k = 2 rows are counted, one per seed."""
    site = two_workers
    db, script = tmp_path / "lost.db", replay_script(tmp_path / "s.yaml", 7, 600)
    proc = subprocess.Popen(site.run(COUNTER, db, "--agent", "replay", "--agent-arg", f"script={script}", "--budget",
                                     "10s", "-k", "2", "--parallel", "2"),
                            env=site.env(), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait("both attempts scored", lambda: _scored(db, 2), proc)
        first = [(name, labels) for name, labels in _containers(COUNTER) if labels["rebench.attempt"] == "1"]
        (name, labels), = first
        _node_of(site, labels).kill()
        _wait("the lost try's container to go", lambda: name not in [n for n, _ in _containers(COUNTER)], timeout=30)
        site.add_worker()  # the node comes back, as a new Ray node
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert rows(db, ATTEMPTS) == [(1, "error", "infrastructure", 0, None), (2, "limit", None, 1, None),
                                  (3, "limit", None, 1, 1)], (rows(db, ATTEMPTS), err[-2000:])
    (message,), = rows(db, "select error_message from attempts where id = 1")
    assert "Ray worker was lost" in str(message)
    assert rows(db, "select attempt_id, raw from score_events where kind = 'intermediate' order by attempt_id"
                ) == [(1, 7.0), (2, 7.0), (3, 7.0)]
    assert rows(db, "select seed, count(*) from attempts where counted group by seed") == [(0, 1), (1, 1)]
    assert rows(db, "select count(*) from leases where released_at is null") == [(0,)]
    assert len(_nodes_ran(out)) == 2
    assert _containers(COUNTER) == []


def _orphan(attempt_id: int) -> str:
    """A container of attempt `attempt_id` made by a harness process SIGKILLed before it started it."""
    maker = subprocess.Popen([sys.executable, "-c", MAKE_ORPHAN, str(attempt_id), ORPHAN,
                              base_image(docker_engine())], cwd=REPO, text=True, stdout=subprocess.PIPE)
    try:
        assert maker.stdout is not None
        assert maker.stdout.readline().strip() == "made"
    finally:
        maker.send_signal(signal.SIGKILL)
        maker.wait()
    (name,) = [n for n, labels in _containers(ORPHAN) if labels["rebench.attempt"] == str(attempt_id)]
    assert f":{maker.pid}:" in dict(_containers(ORPHAN))[name]["rebench.owner"]
    return name


def test_gc_and_a_new_nodes_first_attempt_reap_dead_owners_containers_and_keep_live_ones(
        two_workers: Site, tmp_path: Path) -> None:
    """All nodes share this machine's engine. While attempt A runs on one node: (a) `rebench gc` run
    with that node's settings removes a container whose owner died, and keeps A's, whose owner (the
    Ray worker) runs; (b) the first attempt of a node that joins later (B, on the only free CPU)
    reaps another such container before it starts, and A's container and attempt run on."""
    site = two_workers
    long_db, script = tmp_path / "a.db", replay_script(tmp_path / "a.yaml", 7, 600)
    proc = subprocess.Popen(site.run(COUNTER, long_db, "--agent", "replay", "--agent-arg", f"script={script}",
                                     "--budget", "10m", "-k", "1"),
                            env=site.env(), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait("attempt A scored", lambda: _scored(long_db, 1), proc)
        (kept, labels), = _containers(COUNTER)
        busy = _node_of(site, labels)

        dead = _orphan(990_101)
        node_env = {**site.env(), "REBENCH_CACHE": str(site.caches[busy.proc.pid])}
        gc = subprocess.run([sys.executable, "-m", "rebench.cli.app", "gc", "--json"], env=node_env, cwd=REPO,
                            text=True, capture_output=True, timeout=120)
        assert gc.returncode == 0, gc.stderr[-2000:]
        report = json.loads(gc.stdout)
        assert dead in report["removed_containers"] and kept in report["kept_running"], report
        assert [n for n, _ in _containers(ORPHAN)] == [] and [n for n, _ in _containers(COUNTER)] == [kept]

        dead = _orphan(990_102)
        (idle,) = [n for n in site.workers() if n is not busy]
        idle.kill()
        fresh = site.add_worker()
        quick = tmp_path / "b.yaml"
        quick.write_text(yaml.safe_dump({"actions": [{"write_file": {"path": "value.txt", "content": "5"}},
                                                     {"score": {}}, {"submit": None}]}))
        b = subprocess.run(site.run(COUNTER, tmp_path / "b.db", "--agent", "replay", "--agent-arg",
                                    f"script={quick}", "--budget", "1m", "-k", "1"),
                           env=site.env(), cwd=REPO, text=True, capture_output=True, timeout=300)
        assert b.returncode == 0, b.stderr[-3000:]
        assert rows(tmp_path / "b.db", "select status, final_raw from attempts") == [("done", 5.0)]
        assert _containers(ORPHAN) == [], "the dead owner's container was left"
        (ran,) = _nodes_ran(b.stdout)
        (mark,) = site.marks(fresh)
        assert mark.startswith(ran)  # B ran on the new node, whose first attempt reaped
        assert [n for n, _ in _containers(COUNTER)] == [kept]
        assert rows(long_db, "select status from attempts") == [("running",)]
        proc.terminate()  # A ran on throughout: now end it as Ctrl-C does
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        for name, _ in _containers(ORPHAN):
            docker_engine().remove_container(name)
    assert rows(long_db, "select status, error_source from attempts") == [("interrupted", "user")], err[-2000:]
    assert _containers(COUNTER) == []



def test_an_installed_agents_bodies_and_session_logs_reach_the_head_and_its_export(two_workers: Site,
                                                                                   tmp_path: Path) -> None:
    """The real `claude` CLI, installed from npm into the agent's image on the worker node, against the fake
    provider on 127.0.0.1, with the provider key only in the environment of `rebench run`: its model-call
    bodies and its session logs, written on the worker, are in the head's snapshot folder when the
    campaign ends (the worker's folder is gone), the rows name them there, and `rebench export inspect`
    on the head rebuilds every call from them."""
    from inspect_ai.log import read_eval_log

    from tests.fake_model_server import FakeModelServer
    from tests.test_installed_agents import KEY, _side_call

    def bash(command: str) -> dict[str, object]:
        return {"tool_calls": [{"name": "Bash", "arguments": {"command": command, "description": "step"}}],
                "usage": {"input_tokens": 900, "output_tokens": 30}}

    site, db = two_workers, tmp_path / "claude.db"
    steps = [bash("echo 7 > answer.txt"), bash("task score"), {"text": "Done.", "usage": {"input_tokens": 950,
                                                                                        "output_tokens": 5}}]
    with FakeModelServer(steps, require_key=KEY, aside=_side_call) as server:
        done = subprocess.run(site.run(GATEWAY, db, "--agent", "claude-code", "--model", "anthropic/claude-test-model",
                                       "--base-url", server.url, "--budget", "10m", "-k", "1"),
                              env=site.env(ANTHROPIC_API_KEY=KEY), cwd=REPO, text=True, capture_output=True,
                              timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_nodes_ran(done.stdout)) == 1, done.stdout[-2000:]
    (status, snapshot), = rows(db, "select status, snapshot_path from attempts")
    assert status == "done" and rows(db, "select count(*) from score_events where kind = 'intermediate'") == [(1,)]
    head = Path(str(snapshot)).parent
    assert head.name == "claude.db-snapshots" and (head / "attempt-1" / "answer.txt").read_text().strip() == "7"
    calls = [json.loads(str(data)) for (data,) in rows(db, "select data from events where kind = 'model_call'")]
    assert len(calls) >= 3 and all(c["input_tokens"] > 0 for c in calls), calls
    for call in calls:
        body = Path(call["extra"]["body_file"])
        assert body.is_relative_to(head / "attempt-1-agent" / "model-calls") and body.is_file(), call["extra"]
    notes = [json.loads(str(data)).get("data", {})
             for (data,) in rows(db, "select data from events where kind = 'note'")]
    (sessions,) = [n["agent_session_files"] for n in notes if "agent_session_files" in n]
    assert sessions and all(Path(p).is_relative_to(head / "attempt-1-agent") and Path(p).exists() for p in sessions)
    assert not rows(db, "select id from events where data like '%rebench-ray-%'")  # no worker path is left

    out = tmp_path / "logs"
    exported = subprocess.run([sys.executable, "-m", "rebench.cli.app", "export", "inspect", "--db", str(db),
                               "--out", str(out), "--json"], env=site.env(), cwd=REPO, text=True,
                              capture_output=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-3000:]
    (log,) = json.loads(exported.stdout)["logs"]
    (sample,) = read_eval_log(log["path"], resolve_attachments=True).samples or []
    models = [event for event in sample.events if event.event == "model"]
    assert len(models) == len(calls)
    assert all((event.metadata or {}).get("request") == "rebuilt from the gateway's body file" for event in models)
    assert _containers(GATEWAY) == []
