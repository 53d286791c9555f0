"""The Ray executor reached the three ways docs/scheduling.md tells a user to reach it, each by the
real `rebench run` in a subprocess on the Docker backend: no address (Ray starts on this machine and
lives as long as the harness), a `ray start --head` and a `ray start --address` worker node under
Ray's token authentication, and that head killed mid-campaign, then `rebench run --resume`.

Each test runs its own copy of the counter fixture under a name of its own, so the containers it
counts are its attempts' only (other tests run counter attempts beside it)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import FIXTURE_ENVS, REPO
from .docker_support import docker_engine
from .ray_support import RayStartCluster, ray_start_cluster
from .sched_support import replay_script, rows

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.docker]

ATTEMPTS = "select id, status, error_source, counted, retry_of from attempts order by id"


def _environment(tmp_path: Path, name: str) -> Path:
    """The counter fixture as environment `name`, alone in an environments folder."""
    envs = tmp_path / "envs"
    shutil.copytree(FIXTURE_ENVS / "counter", envs / name)
    toml = envs / name / "environment.toml"
    toml.write_text(toml.read_text().replace('name = "counter"', f'name = "{name}"', 1))
    return envs


def _containers(name: str) -> list[str]:
    return [c[1] for c in docker_engine().containers() if c[3].get("rebench.environment") == name]


def _env(envs: Path, home: Path, **extra: str) -> dict[str, str]:
    """The user's shell: their home (where Ray keeps its token), no Ray settings but `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), "REBENCH_ENVIRONMENTS": str(envs), **extra}


def _run(name: str, db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rebench.cli.app", "run", "--env", name, "--agent", "reference", "--budget", "1m",
            "-k", "2", "--parallel", "2", "--backend", "docker", "--db", str(db), "--executor", "ray", *extra]


def _check_two_done(done: subprocess.CompletedProcess[str], db: Path, name: str) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ran on Ray node") == 2, done.stdout[-2000:]
    assert rows(db, ATTEMPTS) == [(1, "done", None, 1, None), (2, "done", None, 1, None)]
    assert rows(db, "select final_raw, final_normalized from attempts order by id") == [(11.0, 1.0), (11.0, 1.0)]
    assert _containers(name) == []


def test_no_address_starts_ray_here_for_the_campaign_and_stops_it(tmp_path: Path) -> None:
    """Ray started by the harness outlives the join (it used to die with the thread that joined, and
    the first task never ran) and ends with the harness: no driver process of this run is left."""
    name = "ray_counter_here"
    envs, db = _environment(tmp_path, name), tmp_path / "here.db"
    proc = subprocess.Popen(_run(name, db), env=_env(envs, tmp_path / "home", COLUMNS="200"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        driver = _driver_of(proc)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    _check_two_done(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), db, name)
    _gone(driver)
    # what runs at once is said before the first attempt, with the resources Ray reports
    assert re.search(r"at once: 2 requested, at most 2 at a time on the Ray cluster \(\d+ CPUs? and [\d.]+ GB of "
                     r"memory for tasks, as Ray reports\)", out), out[-2000:]


def _driver_of(proc: subprocess.Popen[str]) -> str:
    """The pid of the harness's Ray driver, a child it starts before the campaign's first row."""
    deadline = time.monotonic() + 120
    while True:
        for pid in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split():
            with contextlib.suppress(OSError):
                if b"rebench.scheduler.ray_driver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        assert time.monotonic() < deadline and proc.poll() is None, "no Ray driver process started"
        time.sleep(0.1)


def _gone(pid: str) -> None:
    """The driver ends with the harness, and its Ray with it (a zombie no one reaps counts as gone)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        assert time.monotonic() < deadline, "the Ray driver outlived the harness"
        time.sleep(0.2)


def test_ray_start_head_and_worker_under_token_authentication(tmp_path: Path) -> None:
    """The head and a worker node as Ray documents them with a token (in the user's ~/.ray), and the
    driver given only the address: it finds the token and joins. A wrong token is refused in one line
    naming the cause and the fix, within --ray-timeout, before any row is written."""
    name = "ray_counter_token"
    envs, home = _environment(tmp_path, name), tmp_path / "home"
    with ray_start_cluster(home) as cluster:
        wrong = tmp_path / "wrong.db"
        started = time.monotonic()
        refused = subprocess.run(_run(name, wrong, "--ray-address", cluster.address, "--ray-timeout", "20s"),
                                 env=_env(envs, home, RAY_AUTH_TOKEN="0" * 64), cwd=REPO, text=True,
                                 capture_output=True, timeout=120)
        assert refused.returncode == 2, refused.stderr[-2000:]
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "InvalidAuthToken" in lines[0] and "RAY_AUTH_TOKEN" in lines[0], refused.stderr
        assert time.monotonic() - started < 20 + 15
        assert not wrong.exists()

        db = tmp_path / "token.db"
        done = subprocess.run(_run(name, db, "--ray-address", cluster.address), env=_env(envs, home), cwd=REPO,
                              text=True, capture_output=True, timeout=300)
        _check_two_done(done, db, name)


def test_the_head_killed_mid_campaign_stops_it_in_one_line_and_resume_counts_each_attempt_once(
        tmp_path: Path) -> None:
    """Both attempts have scored when the head dies: the driver gives up after Ray's reconnect timeout
    (5 s here), both tries end `error` (infrastructure) keeping what they streamed, the campaign stops
    with one line saying how to go on, and nothing is retried on a cluster that is gone. On a new
    head and worker, `rebench run --resume` retries each once: every planned attempt ends with exactly
    one counted row, and the lost tries' containers are gone."""
    name = "ray_counter_lost"
    envs, home, db = _environment(tmp_path, name), tmp_path / "home", tmp_path / "lost.db"
    script = replay_script(tmp_path / "s.yaml", 7, 600)
    env = _env(envs, home, COLUMNS="200", RAY_gcs_rpc_server_reconnect_timeout_s="5")
    cluster = RayStartCluster(home)
    try:
        cluster.start_head()
        cluster.add_worker()
        args = [sys.executable, "-m", "rebench.cli.app", "run", "--env", name, "--agent", "replay", "--agent-arg",
                f"script={script}", "--budget", "20s", "-k", "2", "--parallel", "2", "--backend", "docker",
                "--db", str(db), "--executor", "ray", "--ray-address", cluster.address]
        proc = subprocess.Popen(args, env=env, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 240
            while not db.exists() or rows(db, "select count(*) from score_events where kind = 'intermediate'"
                                          ) != [(2,)]:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr and proc.stderr.read()[-3000:]
                time.sleep(0.2)
            cluster.nodes[0].kill()  # the head: its GCS, raylet and the `ray start` watching them
            _, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 2, err[-3000:]
        errors = [line for line in err.splitlines() if line.startswith("error:")]  # the rest: the image's build
        assert len(errors) == 1 and errors == err.strip().splitlines()[-1:], err[-3000:]
        assert "the Ray cluster was lost" in errors[0] and "GCS stopped answering" in errors[0], errors
        assert "rebench run --resume 1" in errors[0], errors
        assert rows(db, ATTEMPTS) == [(1, "error", "infrastructure", 1, None), (2, "error", "infrastructure", 1, None)]
        assert rows(db, "select attempt_id, raw from score_events where kind = 'intermediate' order by attempt_id"
                    ) == [(1, 7.0), (2, 7.0)]
        cluster.stop()

        cluster.start_head()
        cluster.add_worker()
        resumed = subprocess.run([sys.executable, "-m", "rebench.cli.app", "run", "--resume", "1", "--db", str(db)],
                                 env=_env(envs, home), cwd=REPO, text=True, capture_output=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    finally:
        cluster.stop()
    assert rows(db, ATTEMPTS) == [(1, "error", "infrastructure", 0, None), (2, "error", "infrastructure", 0, None),
                                  (3, "limit", None, 1, 1), (4, "limit", None, 1, 2)]
    assert rows(db, "select seed, count(*) from attempts where counted group by seed") == [(0, 1), (1, 1)]
    assert _containers(name) == []


def test_sigterm_mid_campaign_interrupts_the_attempts_on_ray_and_leaves_nothing_running(tmp_path: Path) -> None:
    """SIGTERM (as Ctrl-C) while both attempts run on a Ray instance the harness started: each is
    `interrupted` by the user, its task and container stopped, and the driver (with its Ray) gone."""
    name = "ray_counter_term"
    envs, db = _environment(tmp_path, name), tmp_path / "term.db"
    script = replay_script(tmp_path / "s.yaml", 7, 600)
    args = [sys.executable, "-m", "rebench.cli.app", "run", "--env", name, "--agent", "replay", "--agent-arg",
            f"script={script}", "--budget", "10m", "-k", "2", "--parallel", "2", "--backend", "docker",
            "--db", str(db), "--executor", "ray"]
    proc = subprocess.Popen(args, env=_env(envs, tmp_path / "home", COLUMNS="200"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not db.exists() or rows(db, "select count(*) from score_events where kind = 'intermediate'") != [(2,)]:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr and proc.stderr.read()[-3000:]
            time.sleep(0.2)
        driver = _driver_of(proc)
        proc.terminate()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and err.strip().splitlines()[-1] == "error: interrupted", err[-2000:]
    assert rows(db, "select status, error_source, error_message from attempts order by id") == [
        ("interrupted", "user", "interrupted by the user")] * 2
    assert _containers(name) == []
    _gone(driver)
