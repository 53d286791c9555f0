"""The issue's "Done when": human attempts end to end, through the real CLI (`rebench human start`,
detached supervisor), a real Docker container and the real OpenSSH client with a key generated
here, on the dependency-free `counter` fixture environment (score = the number in value.txt)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from .conftest import run_cli
from .docker_support import base_image, docker_engine

pytestmark = [pytest.mark.docker, pytest.mark.slow]
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
               "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]


class Human:
    """One started human attempt: its database, id, port and key."""

    def __init__(self, db: Path, envs: Path, key: Path) -> None:
        self.db, self.envs, self.key = db, envs, key
        self.attempt_id = 0
        self.port = 0

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, "--db", str(self.db), env={"REBENCH_ENVIRONMENTS": str(self.envs)}, timeout=timeout)

    def start(self, budget: str) -> None:
        result = self.cli("human", "start", "--env", "counter", "--profile", "tiny", "--budget", budget,
                          "--name", "Ada Lovelace", "--key", f"{self.key}.pub", "--json")
        assert result.returncode == 0, result.stderr
        started = json.loads(result.stdout)
        self.attempt_id, self.port = started["attempt_id"], started["port"]
        assert started["ssh"] == f"ssh -i {self.key} -p {self.port} agent@127.0.0.1"

    def ssh_args(self, command: str, *, key: Path | None = None, user: str = "agent") -> list[str]:
        return ["ssh", "-i", str(key or self.key), "-p", str(self.port), *SSH_OPTIONS, f"{user}@127.0.0.1", command]

    def ssh(self, command: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.ssh_args(command, **kwargs),  # type: ignore[arg-type]
                              capture_output=True, text=True, timeout=120)

    def rows(self, query: str, *args: object) -> list[tuple]:
        with sqlite3.connect(self.db) as connection:
            return connection.execute(query, args).fetchall()

    def status(self) -> str:
        return str(self.rows("select status from attempts where id = ?", self.attempt_id)[0][0])

    def wait_ended(self, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while self.status() in ("queued", "running"):
            assert time.monotonic() < deadline, f"attempt {self.attempt_id} still {self.status()}"
            time.sleep(0.2)
        return self.status()


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _container_running(container_id: str) -> bool:
    found = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", container_id],
                           capture_output=True, text=True)
    return found.stdout.strip() == "true"


@pytest.fixture
def human(fixture_envs: Path, tmp_path: Path) -> Iterator[Human]:
    if shutil.which("ssh") is None:
        pytest.fail("the OpenSSH client (`ssh`) is needed: install openssh-client")
    base_image(docker_engine())
    built = run_cli("envs", "build", "counter", "--profile", "tiny", "--backend", "docker",
                    env={"REBENCH_ENVIRONMENTS": str(fixture_envs)}, timeout=900)
    assert built.returncode == 0, built.stderr
    started = Human(tmp_path / "rebench.db", fixture_envs, _keygen(tmp_path / "expert"))
    yield started
    if started.db.exists():  # whatever the test left: no supervisor, no container
        for pid, container in started.rows("select supervisor_pid, container_id from human_sessions"):
            if pid:
                with_pid = subprocess.run(["kill", "-9", str(pid)], capture_output=True)
                assert with_pid is not None
            if container:
                subprocess.run(["docker", "rm", "-f", container], capture_output=True)


# Not `alone`: the break's CPU time is asked to be 0.5 s of a 1.5 s busy loop (it gets a core's share
# of that even beside another test's two busy processes), and the break and waiting times are read
# from the recorded pauses, which only grow on a loaded machine.
def test_expert_works_scores_pauses_and_submits(human: Human, tmp_path: Path) -> None:
    human.start("10m")
    listed = json.loads(human.cli("human", "list", "--json").stdout)
    assert [(r["attempt_id"], r["state"], r["expert"], r["supervisor_alive"]) for r in listed] == [
        (human.attempt_id, "waiting", "Ada Lovelace", True)]
    refused = human.ssh("task score")
    assert refused.returncode != 0 and "task start" in refused.stdout + refused.stderr
    # only the expert's key, only the agent user
    assert human.ssh("true", key=_keygen(tmp_path / "intruder")).returncode == 255
    assert human.ssh("true", user="root").returncode == 255
    assert "value.txt" in human.ssh("cat instructions.md").stdout  # the task text, as agents get it
    started = human.ssh("task start")
    assert started.returncode == 0, started.stderr
    edited = human.ssh("cd solution && echo 9 > value.txt && cat value.txt && cat /protected/answer.txt")
    assert edited.stdout.strip() == "9" and "Permission denied" in edited.stderr
    scored = human.ssh("task score")
    assert scored.returncode == 0 and '"score": 9.0' in scored.stdout, scored.stdout + scored.stderr
    assert human.ssh("task pause coffee").returncode == 0
    # work done during a break is not hidden: the container's CPU time in it is reported
    busy = human.ssh("timeout 1.5 sh -c 'while :; do :; done'; true")
    assert busy.returncode == 0, busy.stderr
    time.sleep(0.5)
    resumed = human.ssh("task resume")
    assert resumed.returncode == 0 and "CPU-seconds during the break" in resumed.stdout, resumed.stdout
    status = human.ssh("task status")
    assert "state: working" in status.stdout and "scores: 1" in status.stdout
    submitted = human.ssh("task submit")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert human.wait_ended() == "done"

    (final_raw, normalized, working, wall, submitted_flag, agent), = human.rows(
        "select final_raw, final_normalized, working_s, wall_s, submitted, agent from attempts")
    assert (final_raw, normalized, submitted_flag, agent) == (9.0, pytest.approx(0.8), 1, "human")
    assert human.rows("select kind, raw from score_events order by id") == [("baseline", 1.0), ("intermediate", 9.0)]
    pauses = dict(human.rows("select reason, end_s - start_s from pauses where reason in ('waiting', 'break')"))
    assert pauses["break"] >= 2.0
    assert wall - working >= pauses["break"] + pauses["waiting"] - 0.5  # the break did not count
    # the supervisor marks the session ended just after the runner finishes the attempt's row
    deadline = time.monotonic() + 30
    while human.rows("select state from human_sessions") != [("ended",)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert human.rows("select state from human_sessions") == [("ended",)]
    sessions = [json.loads(d) for (d,) in human.rows("select data from events where kind = 'ssh_session'")]
    closed = [s for s in sessions if s["ended"]]
    assert len(closed) >= 8
    recordings = [Path(s["recording"]) for s in closed if s.get("recording")]
    assert recordings and all(path.is_file() for path in recordings)
    everything = "".join(path.read_text(errors="replace") for path in recordings)
    assert "9.0" in everything and "state: working" in everything  # the commands' output is recorded
    notes = [json.loads(d) for (d,) in human.rows("select data from events where kind = 'note'")]
    break_cpu = [n["data"]["break_cpu_s"] for n in notes if "break_cpu_s" in n.get("data", {})]
    assert len(break_cpu) == 1 and break_cpu[0] >= 0.5, notes
    tasks = [json.loads(d)["command"] for (d,) in human.rows("select data from events where kind = 'task'")]
    assert tasks == ["score", "start", "score", "pause", "resume", "status", "submit"]
    assert not _container_running(str(human.rows("select container_id from human_sessions")[0][0]))


def test_budget_closes_the_open_session(human: Human) -> None:
    human.start("15s")
    assert human.ssh("task start").returncode == 0
    started = time.monotonic()
    session = subprocess.Popen(human.ssh_args("sleep 300"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        session.wait(timeout=15 + 5 + 3)  # the budget, the 5 s the issue allows, ssh's own latency
    except subprocess.TimeoutExpired:
        session.kill()
        pytest.fail("the expert's session outlived the budget by more than 5 s")
    closed_at = datetime.now(UTC)
    assert time.monotonic() - started >= 14
    assert human.wait_ended() == "limit"
    assert human.rows("select limit_reason from attempts") == [("time",)]
    (limit_at,), = human.rows("select created_at from events where kind = 'limit'")
    reached = datetime.fromisoformat(limit_at).replace(tzinfo=UTC)
    assert (closed_at - reached).total_seconds() < 5  # the session closed within 5 s of the budget


def test_dead_supervisor_attach_then_stop(human: Human) -> None:
    human.start("10m")
    assert human.ssh("task start").returncode == 0
    assert human.ssh("cd solution && echo 5 > value.txt && task score").returncode == 0
    (pid, container), = human.rows("select supervisor_pid, container_id from human_sessions")
    os.kill(pid, signal.SIGKILL)
    time.sleep(3)
    assert _container_running(container)  # the expert's work lives on
    assert human.status() == "running"
    assert human.ssh("true").returncode == 255  # the relay died with its supervisor
    listed = json.loads(human.cli("human", "list", "--json").stdout)
    assert [(r["status"], r["supervisor_alive"]) for r in listed] == [("running", False)]
    refused = human.cli("human", "attach", str(human.attempt_id + 1))
    assert refused.returncode == 2
    attached = human.cli("human", "attach", str(human.attempt_id))
    assert attached.returncode == 0, attached.stderr
    assert f"-p {human.port} " in attached.stdout  # the same port
    again = human.cli("human", "attach", str(human.attempt_id))
    assert again.returncode == 2 and "live supervisor" in again.stderr
    status = human.ssh("task status")
    assert status.returncode == 0 and "scores: 1" in status.stdout, status.stdout + status.stderr
    assert human.rows("select count(*) from pauses where reason = 'harness-down' and end_s - start_s > 2") == [(1,)]
    stopped = human.cli("human", "stop", str(human.attempt_id), "--reason", "end of test")
    assert stopped.returncode == 0, stopped.stderr
    assert human.status() == "done"
    (final_raw, submitted), = human.rows("select final_raw, submitted from attempts")
    assert (final_raw, submitted) == (5.0, 0)
    assert not _container_running(container)
    seqs = [s for (s,) in human.rows("select seq from events order by id")]
    assert seqs == sorted(set(seqs))  # the resumed log numbers on


ASK_GATEWAY = ("python3 -c \"import json, urllib.request; "
               "env = dict(l.strip().split('=', 1) for l in open('api.env')); "
               "body = json.dumps({'model': env['REBENCH_GATEWAY_MODEL'], 'temperature': 0, "
               "'messages': [{'role': 'user', 'content': 'hello'}]}).encode(); "
               "r = urllib.request.Request(env['OPENAI_BASE_URL'] + '/chat/completions', data=body, "
               "headers={'Authorization': 'Bearer ' + env['OPENAI_API_KEY']}); "
               "print(json.loads(urllib.request.urlopen(r, timeout=20).read())['choices'][0]['message']['content'])\"")


def test_an_expert_reaches_the_environments_model_and_keeps_it_across_a_new_supervisor(human: Human) -> None:
    """An environment with a model gateway gives the expert what it gives agents (api.env, one
    token, the metered model, no network), and a new supervisor serves the same token and goes on
    counting the same credit."""
    built = run_cli("envs", "build", "gateway_echo", "--profile", "tiny", "--backend", "docker",
                    env={"REBENCH_ENVIRONMENTS": str(human.envs)}, timeout=900)
    assert built.returncode == 0, built.stderr
    result = human.cli("human", "start", "--env", "gateway_echo", "--profile", "tiny", "--budget", "10m",
                       "--name", "Grace Hopper", "--key", f"{human.key}.pub", "--json")
    assert result.returncode == 0, result.stderr
    started = json.loads(result.stdout)
    human.attempt_id, human.port = started["attempt_id"], started["port"]
    assert human.ssh("task start").returncode == 0
    first = human.ssh(ASK_GATEWAY)
    assert first.returncode == 0 and first.stdout.strip() == "echo hello", first.stderr
    assert human.ssh("curl -sS -m 3 http://192.0.2.1/ || python3 -c \"import socket; "
                     "socket.create_connection(('192.0.2.1', 80), 3)\"").returncode != 0  # no other route
    (pid,), = human.rows("select supervisor_pid from human_sessions")
    os.kill(pid, signal.SIGKILL)
    time.sleep(1)
    attached = human.cli("human", "attach", str(human.attempt_id))
    assert attached.returncode == 0, attached.stderr
    again = human.ssh(ASK_GATEWAY)  # the token in api.env still works
    assert again.returncode == 0 and again.stdout.strip() == "echo hello", again.stderr
    # the gateway commits its rows in batches just after answering (records.BATCH_S): wait for the second
    query = "select meter, status from gateway_requests where meter = 'agent' order by id"
    deadline = time.monotonic() + 10
    while len(human.rows(query)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert human.rows(query) == [("agent", 200), ("agent", 200)]
    stopped = human.cli("human", "stop", str(human.attempt_id))
    assert stopped.returncode == 0, stopped.stderr
    assert human.status() == "done"


def test_ctrl_c_detaches_a_foreground_supervisor_and_stop_ends_the_attempt(human: Human) -> None:
    """The operator's Ctrl-C (or closed terminal) leaves the attempt running; `stop` with no live
    supervisor reattaches by itself and ends it."""
    foreground = subprocess.Popen(
        [sys.executable, "-m", "rebench.cli.app", "human", "start", "--env", "counter", "--profile", "tiny",
         "--budget", "10m", "--name", "Ada Lovelace", "--key", f"{human.key}.pub", "--foreground",
         "--db", str(human.db)],
        env={**os.environ, "REBENCH_ENVIRONMENTS": str(human.envs), "COLUMNS": "300"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert foreground.stdout is not None
    shown = ""
    while "ssh -i" not in shown:
        line = foreground.stdout.readline()
        assert line, f"the foreground supervisor ended early: {foreground.stderr.read() if foreground.stderr else ''}"
        shown += line
    (human.attempt_id, human.port, pid, container), = human.rows(
        "select attempt_id, port, supervisor_pid, container_id from human_sessions")
    assert pid == foreground.pid
    assert human.ssh("task start").returncode == 0
    assert human.ssh("cd solution && echo 4 > value.txt && task score && sleep 1").returncode == 0
    foreground.send_signal(signal.SIGINT)
    _, err = foreground.communicate(timeout=30)
    assert foreground.returncode == 0 and f"rebench human attach {human.attempt_id}" in err
    assert human.status() == "running" and _container_running(container)
    stopped = human.cli("human", "stop", str(human.attempt_id))
    assert stopped.returncode == 0, stopped.stderr
    assert human.status() == "done" and not _container_running(container)
    assert human.rows("select final_raw, submitted from attempts") == [(4.0, 0)]
    notes = [json.loads(d)["message"] for (d,) in human.rows("select data from events where kind = 'note'")]
    assert "stopped by the operator: no reason given" in notes
    shown = human.cli("human", "status", str(human.attempt_id))
    assert shown.returncode == 0 and "done" in shown.stdout and "pause (waiting)" in shown.stdout


def test_a_timing_profile_is_calibrated_before_the_expert_starts(human: Human) -> None:
    """As `rebench run` does for agents: on a machine without anchors for a hardware-dependent
    profile, `human start` measures them first, so the expert's score is normalized on this machine."""
    built = run_cli("envs", "build", "counter", "--profile", "rescore", "--backend", "docker",
                    env={"REBENCH_ENVIRONMENTS": str(human.envs)}, timeout=900)
    assert built.returncode == 0, built.stderr
    result = human.cli("human", "start", "--env", "counter", "--profile", "rescore", "--budget", "10m",
                       "--name", "Ada Lovelace", "--key", f"{human.key}.pub", "--json")
    assert result.returncode == 0, result.stderr
    human.attempt_id = json.loads(result.stdout)["attempt_id"]
    assert "no calibration: measuring" in result.stderr
    assert human.rows("select environment, profile from calibrations") == [("counter", "rescore")]
    stopped = human.cli("human", "stop", str(human.attempt_id))
    assert stopped.returncode == 0, stopped.stderr
    assert human.rows("select anchors_kind from attempts") == [("calibrated",)]


def test_start_whose_supervisor_dies_leaves_nothing_behind(human: Human) -> None:
    """The supervisor killed while it takes the baseline score (made slow here): `start` says so in one
    line, exits 2, and no container, supervisor or gate folder is left; the row says why."""
    (human.envs / "counter" / "workspace" / "value.txt").write_text("sleep 4\n")
    rebuilt = run_cli("envs", "build", "counter", "--profile", "tiny", "--backend", "docker",
                      env={"REBENCH_ENVIRONMENTS": str(human.envs)}, timeout=900)
    assert rebuilt.returncode == 0, rebuilt.stderr
    start = subprocess.Popen(
        [sys.executable, "-m", "rebench.cli.app", "human", "start", "--env", "counter", "--budget", "10m",
         "--name", "Ada", "--key", f"{human.key}.pub", "--db", str(human.db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "REBENCH_ENVIRONMENTS": str(human.envs), "COLUMNS": "200"})
    deadline = time.monotonic() + 60
    found: list[tuple] = []
    while not found:
        assert time.monotonic() < deadline and start.poll() is None, "the container never started"
        time.sleep(0.05)
        if human.db.exists():
            with contextlib.suppress(sqlite3.OperationalError):
                found = human.rows("select supervisor_pid, container_id, gate_dir from human_sessions "
                                   "where container_id is not null")
    (pid, container, gate_dir), = found
    os.kill(pid, signal.SIGKILL)
    out, err = start.communicate(timeout=60)
    assert start.returncode == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "failed to start" in lines[0] and "supervisor exited" in lines[0], err
    assert not _container_running(container) and not Path(gate_dir).exists()
    (status, message), = human.rows("select status, error_message from attempts")
    assert status == "error" and "supervisor exited" in message
    refused = human.cli("human", "attach", "1")
    assert refused.returncode == 2 and "already ended (error)" in refused.stderr


def test_gpus_are_leased_and_reach_the_container_request(human: Human) -> None:
    """`--gpus 0` is leased at the human priority and handed to Docker as a GPU request. This machine has
    no NVIDIA runtime, so Docker refuses the container: that refusal is the proof the ids got there (the
    GPU itself cannot run here); the start fails in one line and the lease rows are given back."""
    result = human.cli("human", "start", "--env", "counter", "--profile", "tiny", "--budget", "10m",
                       "--name", "Ada", "--key", f"{human.key}.pub", "--gpus", "0")
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "failed to start" in lines[0] and "nvidia" in lines[0].lower(), result.stderr
    (attempt_id, gpus), = human.rows("select attempt_id, gpus from human_sessions")
    assert json.loads(gpus) == [0]
    leases = human.rows("select kind, device, priority, released_at from leases where attempt_id = ?", attempt_id)
    assert sorted((kind, device, priority) for kind, device, priority, _ in leases) == [
        ("attempt", None, 10), ("gpu", 0, 10)]
    assert all(released for *_, released in leases), leases
