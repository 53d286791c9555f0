"""Optimize a Kernel: work done outside the timed window, or in processes whose CPU time is not
charged, must not lower the score.

Each case scores the honest reference solution and a hostile `solution.py` (same algorithm, with
the work moved where the old scorer did not look) and asserts that the hostile one is not faster
than the honest one beyond timing noise, that its answers are still checked (it stays valid only
by computing the right answer), and that the attempt is recorded as it ran. The Docker cases run a
`replay` attempt through the real CLI on the tiny profile; the local cases call the scorer
directly on a smaller input, for a fast check of the same mechanism.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebench.sandbox.docker.engine import LABEL_OWNER, owner_alive

from ..docker_support import base_image, docker_engine

REPO = Path(__file__).resolve().parents[2]
ENV = REPO / "environments" / "triton_cumsum"
# Scores are ln(ms): the hostile solution must not be more than 25% faster than the honest one.
NOISE = math.log(1.25)
MAX_ROUNDS = 8
DOCKER_ROUNDS = 3

# Every buffer the algorithm uses is allocated once per size and reused, and the answer is written
# where the caller says: a fresh 8 MB tensor per call costs page faults whose count depends on where
# the allocator put it (a whole process ran a third slower than the next one on that alone), which
# no comparison of honest and hostile timings should have to see through.
_ALGORITHM = '''
_scratch = {}


def _reference(x, out):
    n = x.numel()
    if _scratch.get("n") != n:
        _scratch.update(n=n, positive=torch.empty(n, dtype=torch.bool), ones=torch.empty(n, dtype=torch.int32),
                        parity=torch.empty(n, dtype=torch.int32))
    positive, ones, parity = _scratch["positive"], _scratch["ones"], _scratch["parity"]
    torch.gt(x, 0, out=positive)
    ones.copy_(positive)
    torch.cumsum(ones, dim=0, dtype=torch.int32, out=parity)
    parity.sub_(ones).bitwise_and_(1).mul_(x)
    return torch.cumsum(parity, dim=0, dtype=torch.int32, out=out)
'''
# The honest baseline runs the hostile cases' own algorithm in the call (the environment's reference
# is a faster Numba kernel, beside which a hostile PyTorch solution would look slow whatever it hid),
# and hands its answer over the way they do: written into a buffer mapped once at import, whose pages
# are already there after the first call.
HONEST = '''"""Honest: the same algorithm, computed in the call."""
import mmap

import torch
''' + _ALGORITHM + '''
_out = mmap.mmap(-1, 1 << 26)


def prefix_sum(x):
    return _reference(x, torch.frombuffer(_out, dtype=torch.int32, count=x.numel()))
'''

# At import: fork a helper that maps the scorer's shared input/output buffers (found by name among
# the process's open files), and hook the worker's loop (it calls torch.frombuffer when the input
# is handed over) so the helper computes the answer as soon as the input exists. On the old scorer
# that was before the clock started, and the helper's CPU time was not charged either.
PRECOMPUTE = '''"""Hostile: the answer is computed by a forked helper while the input is handed over."""
import mmap
import os
import sys

import torch
''' + _ALGORITHM + '''

def _memfd(name):
    for entry in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{entry}").startswith("/memfd:" + name):
                return int(entry)
        except OSError:
            pass
    return None


_ready = {}
_input_fd, _output_fd = _memfd("rebench-input"), _memfd("rebench-output")
_real_frombuffer = torch.frombuffer
if _input_fd is not None and _output_fd is not None:
    _size = os.fstat(_input_fd).st_size
    _in, _out = mmap.mmap(_input_fd, _size), mmap.mmap(_output_fd, _size)
    _ask_r, _ask_w = os.pipe()
    _tell_r, _tell_w = os.pipe()
    if os.fork() == 0:
        os.close(_ask_w)
        torch.set_num_threads(1)
        while True:
            asked = os.read(_ask_r, 8)
            if len(asked) < 8:
                os._exit(0)
            n = int.from_bytes(asked, "little")
            x = _real_frombuffer(_in, dtype=torch.int32, count=n)
            _reference(x, _real_frombuffer(_out, dtype=torch.int32, count=n))
            os.write(_tell_w, b"k")
    os.close(_ask_r)

    def _hooked(buffer, *args, **kwargs):
        tensor = _real_frombuffer(buffer, *args, **kwargs)
        if tensor.numel() >= 1024 and bytes(memoryview(buffer)[:4096]) == _in[:4096]:  # the input buffer
            os.write(_ask_w, tensor.numel().to_bytes(8, "little"))
            os.read(_tell_r, 1)
            _ready["n"] = tensor.numel()
            print("attack: helper computed the answer during the hand-over", file=sys.stderr, flush=True)
        return tensor

    torch.frombuffer = _hooked


def prefix_sum(x):
    if _ready.pop("n", None) == x.numel():
        return _real_frombuffer(_out, dtype=torch.int32, count=x.numel())
    print("attack: no precomputed answer", file=sys.stderr, flush=True)
    return _reference(x, torch.empty_like(x))
'''

# At import: double-fork a helper into its own session (it is reparented away from the worker) and
# give it the work of every call through shared memory; the worker only sleeps while it waits.
DOUBLE_FORK = '''"""Hostile: every call's work is done by a double-forked helper in its own session."""
import mmap
import os
import sys

import torch
''' + _ALGORITHM + '''

_CAPACITY = 1 << 26
_in, _out = mmap.mmap(-1, _CAPACITY), mmap.mmap(-1, _CAPACITY)
_ask_r, _ask_w = os.pipe()
_tell_r, _tell_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    os.close(_ask_w)
    os.close(_tell_r)
    torch.set_num_threads(1)
    while True:
        asked = os.read(_ask_r, 8)
        if len(asked) < 8:
            os._exit(0)
        n = int.from_bytes(asked, "little")
        x = torch.frombuffer(_in, dtype=torch.int32, count=n)
        _reference(x, torch.frombuffer(_out, dtype=torch.int32, count=n))
        os.write(_tell_w, b"k")
os.wait()
os.close(_ask_r)
os.close(_tell_w)
print(f"attack: helper detached from worker {os.getpid()}", file=sys.stderr, flush=True)


def prefix_sum(x):
    n = x.numel()
    torch.frombuffer(_in, dtype=torch.int32, count=n).copy_(x)
    os.write(_ask_w, n.to_bytes(8, "little"))
    os.read(_tell_r, 1)
    return torch.frombuffer(_out, dtype=torch.int32, count=n)
'''

# Ask for SIGCHLD to be ignored, so that children are reaped by the kernel without their CPU time
# being added to anyone's; then fork a short-lived child for every call's work.
AUTOREAP = '''"""Hostile: every call's work is done by a child that the kernel reaps without accounting."""
import mmap
import os
import signal
import sys

import torch
''' + _ALGORITHM + '''

try:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _ignored = True
    print("attack: helper children will be reaped unaccounted", file=sys.stderr, flush=True)
except OSError as exc:
    _ignored = False
    print(f"attack: helper children are accounted ({exc})", file=sys.stderr, flush=True)
_CAPACITY = 1 << 26
_out = mmap.mmap(-1, _CAPACITY)


def prefix_sum(x):
    n = x.numel()
    done_r, done_w = os.pipe()
    child = os.fork()
    if child == 0:
        torch.set_num_threads(1)
        _reference(x, torch.frombuffer(_out, dtype=torch.int32, count=n))
        os.write(done_w, b"k")
        os._exit(0)
    os.close(done_w)
    os.read(done_r, 1)
    os.close(done_r)
    if not _ignored:
        os.waitpid(child, 0)
    return torch.frombuffer(_out, dtype=torch.int32, count=n)
'''
ATTACKS = {"precompute": PRECOMPUTE, "double_fork": DOUBLE_FORK, "autoreap": AUTOREAP}


def assert_no_gain(honest: list[float], hostile: list[float]) -> None:
    """Best hostile raw score (ln ms, lower is better) against the best honest one."""
    assert honest and hostile and all(r is not None for r in honest + hostile), (honest, hostile)
    assert min(hostile) >= min(honest) - NOISE, (
        f"hostile {math.exp(min(hostile)):.2f} ms vs honest {math.exp(min(honest)):.2f} ms"
    )


# -- local backend: the scorer called directly, smaller inputs --------------------------------------

def _score_module() -> Any:
    spec = importlib.util.spec_from_file_location("kernel_score_adversarial", ENV / "scoring" / "score.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _score_locally(tmp_path: Path, name: str, source: str) -> dict[str, Any]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "solution.py").write_text(source, encoding="utf-8")
    ctx = {"device": "cpu", "n_elements": 2_000_000, "check_elements": 1024, "warmup_calls": 2,
           "timed_calls": 5, "call_timeout_s": 20, "torch_threads": 1, "timer": "cpu", "solution": str(folder)}
    result: dict[str, Any] = _score_module().score(ctx)
    return result


def _helpers_left(marker: str) -> list[int]:
    """Processes still running that were started from a hostile solution in `marker`'s folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.adversarial
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.alone  # compares two timings: another worker's load would slow one and not the other
@pytest.mark.parametrize("attack", ATTACKS)
def test_hostile_helpers_gain_nothing_when_scored_locally(tmp_path: Path, attack: str) -> None:
    source = ATTACKS[attack]
    honest: list[dict[str, Any]] = []
    hostile: list[dict[str, Any]] = []
    # In turns: this machine's timings drift in phases lasting several processes. Each process is
    # represented by its fastest call (noise only adds time) and each side by the median of those, not
    # by its single fastest process: one attack process in a fast phase ran at 0.72 of the honest
    # solution's best (CI), while a hole in the charging (a helper's CPU time left out, tried) puts
    # every process at 0.5-0.6 and this median too; with it charged the median stayed at 0.87-1.2.
    # Three rounds, and more only while the attack looks faster, up to eight.
    for i in range(MAX_ROUNDS):
        honest.append(_score_locally(tmp_path, f"honest{i}", HONEST))
        hostile.append(_score_locally(tmp_path, f"hostile{i}", source))
        assert all(r["raw"] is not None for r in honest + hostile), [r["message"] for r in honest + hostile]
        typical = [statistics.median(math.log(min(r["details"]["times_ms"])) for r in side)
                   for side in (honest, hostile)]
        if i + 1 >= 3 and typical[1] >= typical[0] - NOISE:
            break
    assert_no_gain([typical[0]], [typical[1]])
    for result in hostile:
        assert result["message"].get("correct") is True, result
        assert "attack: helper" in result["details"]["solution_output"], result  # the attack really ran
        assert result["details"]["sigchld_guard"] == "active", result
    assert _helpers_left(str(tmp_path)) == [], "a helper of the solution outlived its scoring"


# -- docker backend: a replay attempt through the CLI ----------------------------------------------

def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("REBENCH_ENVIRONMENTS", None)
    return subprocess.run([sys.executable, "-m", "rebench.cli.app", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)


def build_image() -> None:
    """Build (or find cached, and tag as current) the tiny image; cheap when nothing changed."""
    base_image(docker_engine())
    built = cli("envs", "build", "triton_cumsum", "--profile", "tiny", "--backend", "docker")
    assert built.returncode == 0, built.stderr


SUBJECT = "subject"  # the user the submitted code runs as during scoring (see docs/security.md)
LEFT_FILE = "subject_processes_after_scoring.txt"


def replay(tmp_path: Path, hostile: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One attempt that scores the honest reference twice and the hostile solution twice, in turns."""
    actions: list[Any] = []
    for _ in range(2):
        actions += [{"write_file": {"path": "solution.py", "content": HONEST}}, {"score": {}},
                    {"write_file": {"path": "solution.py", "content": hostile}}, {"score": {}},
                    {"bash": f"ps -o pid= -u {SUBJECT} | wc -l >> {LEFT_FILE}"}]
    actions.append({"submit": None})
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": actions}))
    stale = "is missing or out of date"
    for tries in range(5):
        # Another checkout sharing this Docker engine may move the base image's `latest` tag between
        # the build and the run, which stops the attempt before it starts: build
        # again and retry.
        build_image()
        db = tmp_path / f"rebench-{tries}.db"
        result = cli("run", "--env", "triton_cumsum", "--agent", "replay", "--agent-arg", f"script={script}",
                     "--profile", "tiny", "--budget", "10m", "--backend", "docker", "--db", str(db),
                     # raw timings are compared: measuring anchors, or re-scoring at the end (the tiny
                     # profile's rule), would only add score calls
                     "--no-calibrate", "--final-rule", "best")
        if result.returncode != 0 and stale in result.stderr:
            continue
        assert result.returncode == 0, result.stdout + result.stderr
        with sqlite3.connect(db) as connection:
            connection.row_factory = sqlite3.Row
            row = dict(connection.execute("select * from attempts where agent = 'replay'").fetchone())
        if stale not in (row["error_message"] or ""):
            break
    else:
        pytest.fail("the image was moved under every try by another checkout sharing this Docker engine")
    with sqlite3.connect(db) as connection:
        connection.row_factory = sqlite3.Row
        events = [dict(r) for r in connection.execute(
            "select kind, raw, valid, message, details from score_events where attempt_id = ? order by id",
            (row["id"],))]
    assert row["backend"] == "docker" and row["status"] == "done", row
    engine = docker_engine()
    # the run has exited, so a container of its own has a dead owner (a live one is another test's attempt)
    assert not [c for c in engine.containers() if c[3].get("rebench.attempt") == str(row["id"])
                and c[3].get("rebench.environment") == "triton_cumsum" and not owner_alive(c[3].get(LABEL_OWNER, ""))]
    return row, events


@pytest.mark.adversarial
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("attack", ["precompute", "double_fork"])
def test_hostile_helpers_gain_nothing_on_docker(tmp_path: Path, attack: str) -> None:
    # Each attempt scores each side twice. Beside another test's load, both hostile calls of one attempt
    # once came out 25% under the honest ones (CI, 14.0 and 12.6 ms against 19.8 and 16.7), and that
    # attack was at 0.9-1.1 of the honest timing when run again; a hole in the charging puts every call
    # at 0.5-0.6. So, as in the local cases, each side counts by its median and another attempt runs
    # only while the attack looks faster, up to three.
    honest_raw: list[float] = []
    hostile_raw: list[float] = []
    for round_ in range(DOCKER_ROUNDS):
        folder = tmp_path / f"round{round_}"
        folder.mkdir()
        row, events = replay(folder, ATTACKS[attack])
        calls = [e for e in events if e["kind"] == "intermediate"]
        assert len(calls) == 4, events  # every score call is recorded, in order
        honest, hostile = calls[0::2], calls[1::2]
        assert all(e["valid"] for e in honest), honest
        # The hostile solution computes correct answers, so it stays valid; it must just not be faster.
        assert all(e["valid"] for e in hostile), hostile
        for event in hostile:  # the attack really ran, and its helper did not outlive the scoring call
            details = json.loads(event["details"])
            assert "attack: helper" in details["solution_output"], details
            assert details["processes"] >= 2, details  # the helper was in the charged process tree
        # The scorer cannot signal the submitted code's user; the exec server ends all of its processes
        # when the scoring call ends, which the agent saw after each hostile call.
        left = (Path(row["snapshot_path"]) / LEFT_FILE).read_text().split()
        assert left == ["0", "0"], left
        valid = [e["raw"] for e in events if e["valid"]]
        assert row["final_raw"] == pytest.approx(min(valid))  # best of what was recorded, nothing else
        honest_raw += [e["raw"] for e in honest]
        hostile_raw += [e["raw"] for e in hostile]
        if statistics.median(hostile_raw) >= statistics.median(honest_raw) - NOISE:
            break
    assert_no_gain([statistics.median(honest_raw)], [statistics.median(hostile_raw)])
