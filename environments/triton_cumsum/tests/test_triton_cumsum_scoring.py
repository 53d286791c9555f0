"""Pure parts of the kernel scorer, which both profiles share: the `paper` profile's CUDA
path cannot run here, so its correctness rests on these pieces and on the tiny profile
exercising the same code on the CPU."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


score = _load(HERE / "scoring" / "score.py", "triton_cumsum_score")


def loop_prefix_sum(values: list[int]) -> list[int]:
    total, positives, out = 0, 0, []
    for value in values:
        if positives % 2 == 1:
            total += value
        out.append(total)
        positives += value > 0
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_definition_matches_the_formula(seed: int) -> None:
    x = score.random_input(777, np.random.Generator(np.random.PCG64(seed)))
    assert score.reference_prefix_sum(x).tolist() == loop_prefix_sum(x.tolist())


def test_hand_computed_case() -> None:
    x = np.array([3, -2, 5, 1, -4, 0, 2], dtype=np.int32)
    # positives before each index: 0,1,1,2,3,3,3 -> odd at 1,2,4,5,6
    assert score.reference_prefix_sum(x).tolist() == [0, -2, 3, 3, -1, -1, 1]


def int64_definition(x: np.ndarray) -> np.ndarray:
    """The definition as RE-Bench's PyTorch reference computes it: int64 sums, narrowed at the end."""
    is_positive = (x > 0).astype(np.int64)
    included = x.astype(np.int64) * ((np.cumsum(is_positive) - is_positive) % 2)
    return np.cumsum(included).astype(np.int32)


def test_int32_expected_answers_equal_the_int64_definition_even_when_sums_overflow() -> None:
    generator = np.random.Generator(np.random.PCG64(5))
    x = score.random_input(100_000, generator)
    assert np.array_equal(score.reference_prefix_sum(x), int64_definition(x))
    extreme = generator.integers(-2**31, 2**31, size=10_000, dtype=np.int32)  # int32 sums overflow here
    assert np.array_equal(score.reference_prefix_sum(extreme), int64_definition(extreme))


@pytest.mark.torch
@pytest.mark.parametrize("folder", ["workspace", "workspace-paper", "reference"])
@pytest.mark.parametrize("n", [1, 2, 50_000])
def test_shipped_solutions_are_exact(folder: str, n: int) -> None:
    solution = _load(HERE / folder / "solution.py", f"kernel_{folder}")
    x = score.random_input(n, np.random.Generator(np.random.PCG64(9)))
    actual = solution.prefix_sum(torch.from_numpy(x))
    assert actual.dtype == torch.int32 and actual.shape == (n,)
    assert score.check_output(score.reference_prefix_sum(x), actual.numpy()) is None


@pytest.mark.torch
def test_the_reference_is_one_numba_loop_compiled_at_import() -> None:
    """The tiny profile's reference is a kernel (one compiled pass), not rearranged PyTorch calls;
    it is compiled when imported, before any timed call. Its CUDA fallback is exact too."""
    numba = pytest.importorskip("numba")
    reference = _load(HERE / "reference" / "solution.py", "kernel_reference_numba")
    assert isinstance(reference._scan, numba.core.registry.CPUDispatcher)
    assert len(reference._scan.signatures) == 1  # compiled eagerly, for int32 arrays
    x = score.random_input(10_000, np.random.Generator(np.random.PCG64(4)))
    out = np.empty_like(x)
    reference._scan(x, out)
    assert np.array_equal(out, score.reference_prefix_sum(x))
    assert np.array_equal(reference._few_passes(torch.from_numpy(x)).numpy(), out)


def test_the_paper_start_is_re_benchs_with_its_redundant_where_and_only_paper_gets_it() -> None:
    """RE-Bench's starting solution passes the parity mask once more through
    `torch.where(mask, True, False)`; the paper anchors were measured with that pass, so the
    `paper` profile starts from it. `tiny` keeps the start its anchors were measured with."""
    from rebench.environments.registry import EnvironmentRegistry

    paper_start = (HERE / "workspace-paper" / "solution.py").read_text()
    code = "\n".join(line.split("#")[0] for line in paper_start.splitlines() if not line.lstrip().startswith("#"))
    assert re.search(r"torch\.where\(\(positives_so_far % 2\)\.bool\(\), True, False\)", code)
    env = EnvironmentRegistry(HERE.parent).get("triton_cumsum")
    assert env.workspace_for("paper") == HERE / "workspace-paper"
    assert env.workspace_for("tiny") == HERE / "workspace"
    assert "True, False" not in (HERE / "workspace" / "solution.py").read_text()


def test_the_ci_profile_is_tiny_but_for_its_re_score_rounds() -> None:
    """`ci` repeats tiny's table in environment.toml (profiles do not inherit): the same inputs,
    scorer settings, starting solution, limits and declared anchors, fewer re-score rounds. A change
    to one that is not made to the other fails here."""
    from rebench.environments.registry import EnvironmentRegistry

    env = EnvironmentRegistry(HERE.parent).get("triton_cumsum")
    tiny, ci = env.profile("tiny"), env.profile("ci")
    assert ci.params == tiny.params
    assert env.workspace_for("ci") == env.workspace_for("tiny")
    assert (ci.anchors.start, ci.anchors.reference) == (tiny.anchors.start, tiny.anchors.reference)
    same = ("hardware", "resources", "direction", "final_score", "score_timeout_s", "score_visible", "network",
            "hardware_dependent", "snapshot", "assets", "gateway", "final_split")
    assert {name: getattr(ci, name) for name in same} == {name: getattr(tiny, name) for name in same}
    assert ci.rescore.repeats < tiny.rescore.repeats


def test_paper_requirements_pin_the_versions_its_text_names() -> None:
    """RE-Bench told agents "Triton 2.3.1 is installed"; the paper profile installs what it says."""
    pins = {}
    for line in (HERE / "requirements-paper.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split("#")[0].strip().split("==")
            pins[name.lower()] = version
    hint = tomllib.loads((HERE / "environment.toml").read_text())["profiles"]["paper"]["params"]["framework_hint"]
    named = dict(re.findall(r"(Triton|PyTorch) (\d+\.\d+\.\d+)", hint))
    assert named == {"Triton": pins["triton"], "PyTorch": pins["torch"]}, (named, pins)


def test_check_output_names_what_is_wrong() -> None:
    expected = np.array([1, 2, 3], dtype=np.int32)
    assert "shape" in score.check_output(expected, expected[:2])
    assert "1 of 3" in score.check_output(expected, np.array([1, 2, 4], dtype=np.int32))
    assert score.check_output(expected, expected.copy()) is None


@pytest.mark.torch
@pytest.mark.parametrize(("body", "expected"), [
    ("return x.to(torch.int64)", "wrong dtype"),
    ("return x[:10]", "wrong shape"),
    ("return [1, 2, 3]", "expected a torch.Tensor"),
])
def test_the_solution_process_reports_what_is_wrong_with_a_result(tmp_path: Path, body: str, expected: str) -> None:
    result = score.score(_ctx(tmp_path, f"import torch\n\ndef prefix_sum(x):\n    {body}\n", timer="cpu"))
    assert result["raw"] is None and expected in result["message"]["error"], result


def test_one_timed_call_is_used_as_is_and_several_by_median() -> None:
    assert score.aggregate_ms([4.76]) == 4.76
    assert score.aggregate_ms([5.0, 1.0, 100.0]) == 5.0
    assert math.log(score.aggregate_ms([4.728])) == pytest.approx(1.5535, abs=1e-3)  # the paper's start anchor


@pytest.mark.torch
def test_a_call_over_the_timeout_is_invalid_and_its_process_is_ended(tmp_path: Path) -> None:
    hang = "import time\n\ndef prefix_sum(x):\n    time.sleep(600)\n"
    started = time.monotonic()
    result = score.score(_ctx(tmp_path, hang, call_timeout_s=0.5))
    assert result["raw"] is None and result["message"]["timeout"] is True, result
    assert time.monotonic() - started < 60  # far below the 600 s the call would take; loose for busy machines


def test_inputs_span_minus_ten_to_nine() -> None:
    x = score.random_input(100_000, np.random.Generator(np.random.PCG64(0)))
    assert x.dtype == np.int32 and int(x.min()) == -10 and int(x.max()) == 9


def test_cpu_timer_charges_cpu_time_floored_by_wall_time_per_core() -> None:
    assert score.call_ms("wall", 0.030, 0.010, 2) == pytest.approx(30.0)
    # A busy machine stretches wall time, not work: CPU time is charged.
    assert score.call_ms("cpu", 0.045, 0.025, 2) == pytest.approx(25.0)
    # Work hidden elsewhere (CPU time near zero) is still charged wall time per usable core.
    assert score.call_ms("cpu", 0.060, 0.001, 2) == pytest.approx(30.0)
    with pytest.raises(ValueError, match="'cpu'"):
        score.call_ms("gpu", 0.1, 0.1, 1)


def _ctx(tmp_path: Path, solution: str, **params: object) -> dict:
    folder = tmp_path / "solution"
    folder.mkdir()
    (folder / "solution.py").write_text(solution)
    ctx = {"device": "cpu", "n_elements": 20_000, "check_elements": 1024, "warmup_calls": 1, "timed_calls": 3,
           "call_timeout_s": 20, "torch_threads": 1, "solution": str(folder)}
    ctx.update(params)
    return ctx


SLEEPY_CHEAT = '''
import sys
import time
import torch

# Try to stop the clocks of whatever process imports this, and spend the call's time off the CPU
# (as work in another process would).
time.perf_counter = lambda: 0.0
time.process_time = lambda: 0.0
for module in list(sys.modules.values()):
    if hasattr(module, "call_ms"):
        module.call_ms = lambda *args: 0.001


def prefix_sum(x):
    time.sleep(0.08)
    is_positive = (x > 0).to(torch.int64)
    included = x.to(torch.int64) * ((torch.cumsum(is_positive, 0) - is_positive) % 2)
    return torch.cumsum(included, 0).to(torch.int32)
'''


@pytest.mark.torch
def test_cpu_timer_charges_time_spent_off_the_cpu_and_ignores_patched_clocks(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, SLEEPY_CHEAT, timer="cpu"))
    assert result["raw"] is not None, result
    floor_ms = 80 / result["details"]["cores"]
    assert all(t >= 0.95 * floor_ms for t in result["details"]["times_ms"]), result["details"]
    assert result["message"]["time_ms"] >= 0.95 * floor_ms


@pytest.mark.torch
def test_unknown_timer_is_an_environment_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown timer 'sundial'"):
        score.score(_ctx(tmp_path, "def prefix_sum(x):\n    return x\n", timer="sundial"))


CHECKER_CHEAT = '''
import sys
import torch

# Look for the scorer's checker and clock in this process, and disable them; then skip the work.
frame = sys._getframe()
while frame is not None:
    for name in ("check_output", "call_ms", "_perf_counter"):
        if name in frame.f_globals:
            frame.f_globals[name] = (lambda *args: None) if name == "check_output" else (lambda *args: 0.0)
    frame = frame.f_back


def prefix_sum(x):
    return torch.zeros_like(x)
'''


@pytest.mark.torch
def test_a_solution_cannot_switch_off_the_check(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, CHECKER_CHEAT, timer="cpu"))
    assert result["raw"] is None and result["message"]["correct"] is False, result
    assert "wrong values" in result["message"]["error"]


LATE_FILL_CHEAT = '''
import threading
import time
import torch


def _fill(x, out):
    time.sleep(0.02)
    is_positive = (x > 0).to(torch.int64)
    included = x.to(torch.int64) * ((torch.cumsum(is_positive, 0) - is_positive) % 2)
    out.copy_(torch.cumsum(included, 0).to(torch.int32))
    spin = time.process_time() + 0.3  # work after the call has returned
    while time.process_time() < spin:
        pass


def prefix_sum(x):
    out = torch.empty_like(x)
    worker = threading.Thread(target=_fill, args=(x, out))
    worker.start()
    worker.join(0.0)
    real_cpu = torch.Tensor.cpu

    def cpu_after_fill(self, *args, **kwargs):  # make the copy-out wait for the late work
        worker.join()
        return real_cpu(self, *args, **kwargs)

    torch.Tensor.cpu = cpu_after_fill
    return out
'''


@pytest.mark.torch
def test_work_left_running_after_the_call_returns_is_still_charged(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, LATE_FILL_CHEAT, timer="cpu", timed_calls=1))
    assert result["raw"] is not None, result
    assert result["message"]["time_ms"] >= 250, result  # the 0.3 s of CPU spent after the return


@pytest.mark.torch
def test_a_solution_that_fails_to_import_is_invalid_with_the_reason(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, "raise RuntimeError('broken on purpose')\n", timer="cpu"))
    assert result["raw"] is None and "broken on purpose" in result["message"]["error"], result


@pytest.mark.torch
def test_a_solution_process_that_dies_mid_call_is_invalid_with_its_last_output(tmp_path: Path) -> None:
    dying = "import os\n\ndef prefix_sum(x):\n    print('about to quit', flush=True)\n    os._exit(3)\n"
    result = score.score(_ctx(tmp_path, dying, timer="cpu"))
    assert result["raw"] is None, result
    assert "exited with 3" in result["message"]["error"] and "about to quit" in result["message"]["error"], result


HELPER_SPIN = '''
import os
import time

import torch


def _spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _answer(x):
    is_positive = (x > 0).to(torch.int64)
    included = x.to(torch.int64) * ((torch.cumsum(is_positive, 0) - is_positive) % 2)
    return torch.cumsum(included, 0).to(torch.int32)
'''

# The call's CPU work is done by a helper that double-forked into its own session at import,
# so it is no longer the worker's child; the worker only waits.
DETACHED_HELPER = HELPER_SPIN + '''
_ask_r, _ask_w = os.pipe()
_tell_r, _tell_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    with open("helper.pid", "w") as handle:
        handle.write(str(os.getpid()))
    while os.read(_ask_r, 1):
        _spin(0.15)
        os.write(_tell_w, b"k")
    os._exit(0)
os.wait()


def prefix_sum(x):
    os.write(_ask_w, b"?")
    os.read(_tell_r, 1)
    return _answer(x)
'''


@pytest.mark.torch
def test_cpu_time_of_a_double_forked_helper_is_charged_and_the_helper_is_ended(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, DETACHED_HELPER, timer="cpu", warmup_calls=0, timed_calls=2))
    assert result["raw"] is not None, result
    assert all(t >= 140 for t in result["details"]["times_ms"]), result["details"]  # the helper's 150 ms each
    assert result["details"]["processes"] >= 2 and result["details"]["leftover_processes_killed"] >= 1
    helper = int((tmp_path / "solution" / "helper.pid").read_text())
    assert not Path(f"/proc/{helper}").exists(), "the helper outlived scoring"


# The call's work is done by a child; the solution first asks for SIGCHLD to be ignored, which
# would have the kernel reap its children without adding their CPU time to anyone's.
IGNORED_CHILDREN = HELPER_SPIN + '''
import signal
import sys

try:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _reaped_by_kernel = True
except OSError as exc:
    print(f"refused: {exc}", file=sys.stderr, flush=True)
    _reaped_by_kernel = False


def prefix_sum(x):
    children = []
    for _ in range(2):  # two at once, so the wall-time floor stays well below their CPU time
        child = os.fork()
        if child == 0:
            _spin(0.15)
            os._exit(0)
        children.append(child)
    for child in children:
        if _reaped_by_kernel:
            while os.path.exists(f"/proc/{child}"):
                time.sleep(0.001)
        else:
            os.waitpid(child, 0)
    return _answer(x)
'''


@pytest.mark.torch
def test_children_cannot_be_reaped_unaccounted(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, IGNORED_CHILDREN, timer="cpu", warmup_calls=0, timed_calls=2))
    assert result["raw"] is not None, result
    assert all(t >= 280 for t in result["details"]["times_ms"]), result["details"]  # the children's 2 x 150 ms
    assert result["details"]["sigchld_guard"] == "active"
    assert "refused: [Errno 1] Operation not permitted" in result["details"]["solution_output"]


def test_usable_cores_follow_a_cgroup_quota_v1_or_v2(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("100000 100000\n")
    assert score.usable_cores(str(v2)) == 1
    (v2 / "cpu.max").write_text("max 100000\n")
    assert score.usable_cores(str(v2)) == affinity
    v1 = tmp_path / "v1" / "cpu,cpuacct"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert score.usable_cores(str(tmp_path / "v1")) == 1  # half a CPU rounds up to one
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert score.usable_cores(str(tmp_path / "v1")) == affinity


@pytest.mark.torch
@pytest.mark.parametrize("timer", ["wall", "cpu"])
def test_the_paper_protocol_loads_the_input_before_the_clock_and_checks_the_answer(tmp_path: Path, timer: str) -> None:
    """The `paper` profile's path (input put on the device before the clock starts) cannot run on
    CUDA here; the same messages run on the CPU."""
    ctx = _ctx(tmp_path, (HERE / "reference" / "solution.py").read_text())
    worker = score.KernelWorker(ctx, "cpu", 50_000, 20.0, preload=True, overhead_calls=2, timer=timer)
    try:
        assert len(worker.overhead_ms) == 2 and all(0 < ms < 20_000 for ms in worker.overhead_ms)
        x = score.random_input(50_000, np.random.Generator(np.random.PCG64(3)))
        actual, problem, wall_s, cpu_s = worker.call(x, 20.0, timer)
        assert problem is None and score.check_output(score.reference_prefix_sum(x), actual) is None
        assert 0 < wall_s < 20 and cpu_s >= 0
        short = x[:1000]
        actual, problem, _, _ = worker.call(short, 20.0, timer)  # a shorter input in the same buffers
        assert problem is None and score.check_output(score.reference_prefix_sum(short), actual) is None
    finally:
        worker.close()


def test_tick_counted_cpu_time_is_charged_with_a_tick_to_spare() -> None:
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert score.ProcessTree.cpu_spent((1.0, 0.5), (1.25, 0.5)) == pytest.approx(0.25)  # nothing reaped: exact
    assert score.ProcessTree.cpu_spent((1.0, 0.5), (1.25, 0.6)) == pytest.approx(0.35 + tick)



# Slow down every reply the solution's process sends, which would inflate the harness's share
# if it were measured once the solution had been imported.
SLOW_REPLIES = """
import json
import time

_dumps = json.dumps


def _late_dumps(*args, **kwargs):  # every reply of the worker's loop is encoded with it
    time.sleep(0.3)
    return _dumps(*args, **kwargs)


json.dumps = _late_dumps
""" + (HERE / "workspace" / "solution.py").read_text()


@pytest.mark.torch
def test_the_harness_overhead_is_timed_before_the_solution_is_imported_and_reported(tmp_path: Path) -> None:
    result = score.score(_ctx(tmp_path, SLOW_REPLIES, timer="wall", warmup_calls=0, timed_calls=1))
    assert result["raw"] is not None, result
    overhead = result["message"]["harness_overhead_ms"]
    assert overhead == pytest.approx(result["details"]["harness_overhead_ms"], abs=1e-3)
    assert len(result["details"]["overhead_times_ms"]) == 3
    assert 0 < overhead < 150, result["details"]  # none of the solution's 300 ms delays
    assert result["details"]["times_ms"][0] >= 300, result["details"]  # while its calls pay them


def test_the_cpu_timers_floor_leaves_out_time_spent_waiting_for_a_core() -> None:
    """Load from other processes stretches the wall time while the calling thread waits for a core:
    that wait is not the solution's, so the floor leaves it out and the CPU time is charged."""
    # 3 busy processes on 2 cores: a 25 ms call of 10 ms CPU, 20 ms of it queued behind them
    assert score.call_ms("cpu", 0.025, 0.010, 2) == pytest.approx(12.5)  # the floor, without the wait
    assert score.call_ms("cpu", 0.025, 0.010, 2, 0.020) == pytest.approx(10.0)
    # time blocked (asleep, or waiting on work elsewhere) is not queued time and stays in the floor
    assert score.call_ms("cpu", 0.060, 0.001, 2, 0.0) == pytest.approx(30.0)


@pytest.mark.torch
def test_the_calling_threads_wait_for_a_core_is_measured_under_load(tmp_path: Path) -> None:
    """A real scoring run beside two spinning processes pinned to the solution's core: the calling
    thread's queued time is read from the kernel and the charge stays near the call's CPU time."""
    import multiprocessing
    import os

    if not os.path.exists(f"/proc/self/task/{os.getpid()}/schedstat"):
        pytest.skip("this kernel does not report schedstat")  # CI's kernel does
    core = sorted(os.sched_getaffinity(0))[0]
    busy = [multiprocessing.Process(target=_spin, args=(core,), daemon=True) for _ in range(2)]
    before = os.sched_getaffinity(0)
    for process in busy:
        process.start()
    os.sched_setaffinity(0, {core})
    try:
        start = (Path(score.__file__).resolve().parents[1] / "workspace" / "solution.py").read_text()
        result = score.score(_ctx(tmp_path, start, n_elements=200_000, timed_calls=5, timer="cpu"))
    finally:
        os.sched_setaffinity(0, before)
        for process in busy:
            process.kill()
    assert result["raw"] is not None, result
    queued = result["details"]["queued_ms"]
    assert len(queued) == 5 and sum(queued) > 0, queued


def _spin(core: int) -> None:
    import os

    os.sched_setaffinity(0, {core})
    while True:
        pass
