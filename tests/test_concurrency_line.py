"""`--parallel N` that the machine cannot hold is said, not silent (issue 55): before the first attempt
starts `rebench run` prints how many attempts run at once and what bounds it (CPUs for a timing score,
memory, GPUs), `campaigns show --json` carries the same, and while attempts wait the progress lines in a
pipe say what for. Each case runs the real CLI on the counter fixture with the local backend; there is
no GPU here, so a fake inventory (REBENCH_FAKE_GPUS) stands in for nvidia-smi in the GPU case."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rebench.scheduler.concurrency import host_concurrency, ray_concurrency
from rebench.scheduler.policy import Need
from rebench.scheduler.queue import host_capacity

from .conftest import REPO
from .sched_support import add_gpu_profile, replay_script, rows

CPUS = len(os.sched_getaffinity(0))
MEMORY_GB = host_capacity(1).memory_gb


def _profile(envs: Path, name: str, resources: str, *, timing: bool = False) -> None:
    toml = envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + f"""
[profiles.{name}]
resources = {{ {resources} }}
direction = "higher"
final_score = "best"
score_timeout_s = 5
hardware_dependent = {str(timing).lower()}
anchors = {{ start = 1.0, reference = 11.0, source = "by construction" }}
params = {{ secret_file = "answer.txt" }}
""")


def _run(envs: Path, tmp_path: Path, profile: str, *extra: str, fake_gpus: str | None = None
         ) -> tuple[subprocess.CompletedProcess[str], Path]:
    db = tmp_path / f"{profile}.db"
    script = replay_script(tmp_path / "s.yaml", 5, 2.5)
    env = {**os.environ, "REBENCH_ENVIRONMENTS": str(envs), "COLUMNS": "200"}
    if fake_gpus is not None:
        env["REBENCH_FAKE_GPUS"] = fake_gpus
    args = ["run", "--env", "counter", "--profile", profile, "--agent", "replay", "--agent-arg", f"script={script}",
            "--budget", "1m", "-k", "3", "--parallel", "3", "--backend", "local", "--no-calibrate",
            "--progress-every", "1s", "--db", str(db), *extra]
    done = subprocess.run([sys.executable, "-m", "rebench.cli.app", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    return done, db


def _check(done: subprocess.CompletedProcess[str], db: Path, line: str, bound: str, waits: str) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    shown = done.stdout
    assert f"at once: {line}" in shown, shown[-3000:]
    assert shown.index("at once:") < shown.index("attempt 1:")  # said before the first attempt's lines
    assert rows(db, "select status, count(*) from attempts group by status") == [("done", 3)]
    # in a pipe, the campaign's line says what the queued ones wait for
    assert re.search(rf"2 queued \(2 waiting for {re.escape(waits)}\)", shown), shown[-3000:]
    assert rows(db, "select count(*) from attempts where waiting_for is not null") == [(0,)]
    env = {**os.environ, "COLUMNS": "200"}
    show = subprocess.run([sys.executable, "-m", "rebench.cli.app", "campaigns", "show", "1", "--db", str(db),
                           "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert show.returncode == 0, show.stderr
    concurrency = json.loads(show.stdout)["concurrency"]
    assert (concurrency["requested"], concurrency["at_once"], concurrency["bounds"]) == (3, 1, [bound])
    table = subprocess.run([sys.executable, "-m", "rebench.cli.app", "campaigns", "show", "1", "--db", str(db)],
                           env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert f"at once: {line}" in table.stdout, table.stdout


@pytest.mark.slow
def test_a_timing_profile_that_needs_every_cpu_runs_one_at_a_time_and_says_so(fixture_envs: Path,
                                                                              tmp_path: Path) -> None:
    _profile(fixture_envs, "cpu", f"gpus = 0, cpus = {CPUS}, memory_gb = 1", timing=True)
    done, db = _run(fixture_envs, tmp_path, "cpu")
    s = "s" if CPUS != 1 else ""
    _check(done, db, f"3 requested, 1 at a time: each attempt needs {CPUS} CPU{s} and 1 GB of memory, "
                     f"this host has {CPUS} CPU{s}", "cpus", "CPUs")


@pytest.mark.slow
def test_a_profile_that_needs_most_of_the_memory_runs_one_at_a_time_and_says_so(fixture_envs: Path,
                                                                                tmp_path: Path) -> None:
    need = round(MEMORY_GB * 0.6, 1)
    _profile(fixture_envs, "memory", f"gpus = 0, cpus = 1, memory_gb = {need}")
    done, db = _run(fixture_envs, tmp_path, "memory")
    _check(done, db, f"3 requested, 1 at a time: each attempt needs {need:.3g} GB of memory, "
                     f"this host has {MEMORY_GB:.3g} GB of memory", "memory", "memory")


@pytest.mark.slow
def test_a_gpu_profile_on_one_device_runs_one_at_a_time_and_says_so(fixture_envs: Path, tmp_path: Path) -> None:
    add_gpu_profile(fixture_envs)
    done, db = _run(fixture_envs, tmp_path, "gpu", "--gpus", "0", fake_gpus="1")
    _check(done, db, "3 requested, 1 at a time: each attempt needs 1 GPU and 1 GB of memory, "
                     "this host has 1 GPU (--gpus)", "gpus", "GPUs")


def test_the_line_names_the_bound_or_says_there_is_none() -> None:
    host = Need(cpus=4, memory_gb=16, slots=8)
    light = ("counter", Need(memory_gb=1, slots=1))
    assert host_concurrency([light] * 8, host).text == "8 requested, 8 at a time"
    assert host_concurrency([light] * 3, host).text == "8 requested, 3 at a time: the campaign has 3 attempts"
    both = host_concurrency([("kernel", Need(cpus=4, memory_gb=12, slots=1))] * 4, host)
    assert (both.at_once, both.bounds) == (1, ["cpus", "memory"])
    assert both.text.endswith("each attempt needs 4 CPUs and 12 GB of memory, this host has 4 CPUs and 16 GB "
                              "of memory")
    mixed = host_concurrency([light, ("kernel", Need(cpus=4, slots=1)), ("kernel", Need(cpus=4, slots=1))], host)
    assert mixed.at_once == 2 and "an attempt of kernel needs 4 CPUs" in mixed.text
    ray = ray_concurrency([("kernel", Need(gpus=1, cpus=2, memory_gb=8, slots=1))] * 16, 16,
                          {"CPU": 32.0, "GPU": 4.0, "memory": 200e9})
    assert (ray.at_once, ray.bounds, ray.executor) == (4, ["gpus"], "ray")
    assert ray.text == ("16 requested, at most 4 at a time on the Ray cluster (4 GPUs, 32 CPUs and 200 GB of memory "
                        "for tasks, as Ray reports): each attempt asks Ray for 1 GPU, 2 CPUs and 8 GB of memory")
