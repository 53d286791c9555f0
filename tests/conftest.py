"""Shared fixtures: a throwaway database, cache and environments folder per test run, and the
kernel environment's calibration, measured once per run.

The suite runs in parallel (pytest-xdist, `-n 3 --dist loadgroup` in pyproject.toml: three workers
on two cores, as a test waiting on a server, a container or a timeout leaves its core idle: with
two workers the cores were idle 19% of the run's second half, and the suite took 1,150 s; with
three, 10% of the whole run, and 1,094 s): each test is handed to whichever worker is free (xdist
reads `xdist_group` markers before this file's collection hook runs, so groups added here would do
nothing; a test file may still mark its own).
What is built once per run (environment virtualenvs and assets, the kernel's calibration) lives in
a folder all workers share, made under a file lock by whichever worker needs it first. A test
marked `alone` (a timing it compares) waits until no other test runs, and no other test starts until
it ends; a test marked `one_core` (a single process with a wall-clock limit far above its run time)
runs beside another `one_core` test only, one per core (`parallel_gate`). Both kinds are handed out
last, the `one_core` ones first, so they run in pairs. A pair is not two free cores: two CPU-bound processes
here slowed each other up to threefold (a foundry finetune paired went from 33 to 95 CPU-s and ran
over its limit), so a limit that is not far above the test's run time still needs `alone`."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from filelock import FileLock, Timeout

REPO = Path(__file__).resolve().parents[1]
FIXTURE_ENVS = Path(__file__).parent / "fixtures" / "envs"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand out the files named in SLOW_FIRST first, so the longest tests do not end the run alone,
    then the `one_core` tests (in pairs, one per worker) and the `alone` tests last: scattered
    through the run, each one left a worker idle until the other worker's current test ended."""
    first = {name: rank for rank, name in enumerate(SLOW_FIRST)}

    def place(item: pytest.Item) -> tuple[int, int]:
        return (_gate_class(item).rank, first.get(item.nodeid.split("::", 1)[0], len(first)))

    items.sort(key=place)
    # A `one_core` test that needs a recorded run an earlier test of its class makes would wait on
    # that run's lock, its core idle (the second Rust test waited 83 s): it goes after the tests of
    # its class that need none, which the other worker runs meanwhile.
    made: set[str] = set()
    waiting: set[str] = set()
    for item in items:
        if _gate_class(item).name == "one_core":
            needed = {name for name in RECORDED_RUNS if name in getattr(item, "fixturenames", ())}
            if needed & made:
                waiting.add(item.nodeid)
            made |= needed
    items.sort(key=lambda item: (place(item)[0], item.nodeid in waiting, place(item)[1]))


RECORDED_RUNS = ("rust_reference_runs", "chat_reference_run", "kernel_first_run")
"""Fixtures that one test of the run makes (tests/reference_runs.py, kernel_first_run below) while
the others that need it wait on its lock."""


# The test files that take longest in CI, longest first (the run's slowest tests say which). The kernel
# campaign leads: it makes the session's kernel calibration (`kernel_first_run`), which the other
# worker would otherwise wait for when its test needs the same.
SLOW_FIRST = (
    "tests/test_kernel_campaign.py",
    "tests/test_ray_artefacts.py",
    "tests/test_ray_docker_cluster.py",
    "tests/adversarial/test_scorer_reads.py",
    "tests/test_docker_environments.py",
    "tests/adversarial/test_installed_agent.py",
    "tests/test_installed_agents.py",
    "tests/adversarial/test_foundry_cache.py",
    "tests/test_docker_kernel.py",
    "tests/test_chat_env_docker.py",
    "tests/test_modular_runner.py",
    "tests/test_model_envs_campaign.py",
    "tests/test_rust_heldout.py",
    "tests/test_chat_heldout.py",
    "tests/test_gpu_validation.py",
    "tests/adversarial/test_mlm_rules.py",
    "tests/test_ray_user_paths.py",
    "tests/adversarial/test_activation_sparsity_attacks.py",
    "tests/adversarial/test_task_command.py",
    "tests/adversarial/test_high_norm_attacks.py",
)


@dataclass(frozen=True)
class _GateClass:
    name: str  # tests of one class run beside each other; "alone" beside nothing
    rank: int  # the order they are handed out in


def _gate_class(item: pytest.Item) -> _GateClass:
    if item.get_closest_marker("alone") is not None:
        return _GateClass("alone", 2)
    if item.get_closest_marker("one_core") is not None:
        return _GateClass("one_core", 1)
    return _GateClass("shared", 0)


@pytest.fixture(autouse=True)
def parallel_gate(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Under xdist, a test holds its class's lock shared while it runs: `shared` (most tests) or
    `one_core`; it enters only after taking the other class's lock exclusively for a moment (no test
    of that class runs), under the gate lock, which makes entering one at a time, so nothing of the
    other class can enter in between; a `one_core` test then takes one of a slot per core
    (`_take_core_slot`), lent while it waits for another test's recorded run (`recorded_run`). An
    `alone` test takes both class locks exclusively and keeps the gate until it ends, so no test
    starts beside it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    folder = shared_folder(tmp_path_factory, "parallel-gate")
    kind = _gate_class(request.node).name
    with open(folder / "gate", "a") as gate, open(folder / "shared", "a") as shared, \
            open(folder / "one_core", "a") as one_core:
        own, other = (one_core, shared) if kind == "one_core" else (shared, one_core)
        slot: IO[str] | None = None
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            if kind == "alone":
                fcntl.flock(shared, fcntl.LOCK_EX)
                fcntl.flock(one_core, fcntl.LOCK_EX)
            else:
                fcntl.flock(other, fcntl.LOCK_EX)
                fcntl.flock(other, fcntl.LOCK_UN)
                fcntl.flock(own, fcntl.LOCK_SH)
            # One `one_core` test per core: a worker beyond that waits here, holding the gate, which
            # keeps out only `shared` and `alone` tests, which could not enter beside it anyway.
            if kind == "one_core":
                slot = _take_core_slot(folder)
                _CORE_SLOT.update(file=slot, folder=folder)
        finally:
            if kind != "alone":
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            if slot is not None:
                held = _CORE_SLOT.pop("file", None)
                if held is not None:
                    held.close()
                _CORE_SLOT.clear()
            fcntl.flock(shared, fcntl.LOCK_UN)
            fcntl.flock(one_core, fcntl.LOCK_UN)
            if kind == "alone":
                fcntl.flock(gate, fcntl.LOCK_UN)


_CORE_SLOT: dict[str, Any] = {}
"""The core slot this worker's running `one_core` test holds (`file`), and the gate's folder."""


@contextlib.contextmanager
def _core_slot_lent() -> Iterator[None]:
    """Give the running test's core slot back while it waits for another test's work (a recorded
    run), so that a `one_core` test that needs none runs meanwhile; take one again after."""
    if not _CORE_SLOT:
        yield
        return
    _CORE_SLOT.pop("file").close()
    try:
        yield
    finally:
        _CORE_SLOT["file"] = _take_core_slot(_CORE_SLOT["folder"])


def _take_core_slot(folder: Path) -> IO[str]:
    """An exclusive lock on one of as many slot files as this process may use cores; held until
    closed. Polled: there is no waiting on the first of several locks."""
    cores = len(os.sched_getaffinity(0))
    while True:
        for index in range(cores):
            slot = open(folder / f"core-{index}", "a")  # noqa: SIM115 (closed by the caller)
            try:
                fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                slot.close()
                continue
            return slot
        time.sleep(0.1)


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture(autouse=True)
def one_thread_beside_another_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under xdist, a test that may run beside another one does its PyTorch work on one thread,
    in this process and in the processes it starts (what an environment sets for itself still
    wins). Each worker's PyTorch otherwise takes both cores, and its threads' spinning at every
    parallel region costs the other worker's test CPU: a held-out test beside a busy core took
    159 CPU-s with two threads and 126 with one. An `alone` test keeps every core."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or _gate_class(request.node).name == "alone":
        yield
        return
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, "1"))
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(threads if threads is not None else os.cpu_count() or 1)


def shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder every xdist worker of this run sees (the run's base temp folder), or this
    session's own when the tests run in one process."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep test virtualenvs, assets and attempt folders out of the user's cache; shared by the
    run's workers (the builds lock per content hash, so one builds and the others reuse)."""
    cache = Path(os.environ.get("REBENCH_TEST_CACHE") or shared_folder(tmp_path_factory, "rebench-cache"))
    if os.environ.get("REBENCH_TEST_KEEP_ASSETS") and not os.environ.get("REBENCH_TEST_CACHE"):
        keep_environment_assets(cache, Path(os.environ["REBENCH_TEST_KEEP_ASSETS"]))
    previous = os.environ.get("REBENCH_CACHE")
    os.environ["REBENCH_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("REBENCH_CACHE", None)
    else:
        os.environ["REBENCH_CACHE"] = previous


def keep_environment_assets(cache: Path, keep: Path) -> None:
    """The bundled environments' built assets live in `keep`, which outlasts the run (.ci/run sets
    REBENCH_TEST_KEEP_ASSETS), so a run on the same machine trains only what changed: a folder per
    profile and content hash (environment files, params, kit version), built under a lock and marked
    complete last, is never rebuilt differently. Fixture environments keep theirs per run (their tests
    count what a build leaves); .ci/run removes kept `paper` builds before each run (they come from
    operator files the tests make, which the content hash does not cover)."""
    for toml in sorted((REPO / "environments").glob("*/environment.toml")):
        kept = keep / toml.parent.name
        kept.mkdir(parents=True, exist_ok=True)
        link = cache / "assets" / toml.parent.name
        link.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another worker of this run made it
            link.symlink_to(kept, target_is_directory=True)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "rebench.db"


@pytest.fixture
def fixture_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of the test-fixture environments, selected through REBENCH_ENVIRONMENTS."""
    target = tmp_path / "envs"
    shutil.copytree(FIXTURE_ENVS, target)
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(target))
    return target


def interruptible() -> None:
    """`preexec_fn` for a child a test sends SIGINT: its SIGINT back to the default, as a terminal's
    Ctrl-C finds it. A suite started in the background (nohup, `&` in a script) ignores SIGINT, the
    child would inherit that and, as a background job should, not stop."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `rebench` command line in a subprocess."""
    full_env = {**os.environ, **(env or {}), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "rebench.cli.app", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd or REPO)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the real CLI entry point in this process: (exit status, stdout, stderr)."""
    from rebench.cli.app import main

    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@dataclass(frozen=True)
class RecordedRun:
    """A `rebench run` made once per test session (`recorded_run`) and the database it wrote."""

    result: subprocess.CompletedProcess[str]
    db: Path

    def copy_to(self, target: Path) -> Path:
        """A copy of the database to add attempts to (the session's stays as it was)."""
        shutil.copyfile(self.db, target)
        return target


def recorded_run(folder: Path, *args: str, timeout: float) -> RecordedRun:
    """`rebench run ARGS --db FOLDER/run.db` (the bundled environments), made by the first worker
    that asks, under a lock in FOLDER, and recorded there; the others wait, then read the record. A
    failed run fails every test that asks for it, with its stderr."""
    db, record = folder / "run.db", folder / "result.json"
    lock = FileLock(str(folder / "lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:  # another worker is making it
        with _core_slot_lent():
            lock.acquire()
    try:
        if not record.exists():
            done = run_cli("run", *args, "--db", str(db), timeout=timeout,
                           env={"REBENCH_ENVIRONMENTS": str(REPO / "environments")})
            record.write_text(json.dumps({"args": done.args, "returncode": done.returncode,
                                          "stdout": done.stdout, "stderr": done.stderr}))
    finally:
        lock.release()
    saved = json.loads(record.read_text())
    result = subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"], saved["stderr"])
    assert result.returncode == 0, result.stderr[-3000:]
    return RecordedRun(result, db)


@pytest.fixture(scope="session")
def kernel_first_run(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    """One reference attempt on the kernel environment's tiny profile (local backend) on a fresh
    database, which makes `rebench run` measure the anchors first. Measuring them takes six score
    calls, so it happens once per run (the first worker that needs it; the others wait and read
    its record): tests/test_kernel_campaign.py checks this run, and the tests that need calibrated
    anchors copy them (`calibrated_kernel_ci_db`) or reuse the run (tests/inspect_campaigns.py)."""
    return recorded_run(shared_folder(tmp_path_factory, "kernel-first-run"), "--env", "triton_cumsum",
                        "--agent", "reference", "--profile", "tiny", "--budget", "10m", "-k", "1",
                        "--backend", "local", timeout=900)


@pytest.fixture
def calibrated_kernel_ci_db(tmp_path: Path, kernel_first_run: RecordedRun) -> Path:
    """A fresh database holding only a calibration of the kernel's `ci` profile, saved through the
    product's own `save_calibration` from this session's tiny samples: ci's scoring is tiny's (the
    same inputs, scorer and parameters; only its re-score rounds are fewer;
    environments/triton_cumsum/tests checks that), so tiny's samples are ci's measurement."""
    return kernel_calibration_into(tmp_path / "calibrated-ci.db", kernel_first_run, "ci")


def kernel_calibration_into(db: Path, kernel_first_run: RecordedRun, profile: str) -> Path:
    """Save PROFILE's calibration into DB (a new or an existing database) from the session's tiny
    samples; for the `ci` profile, whose scoring is tiny's."""
    from rebench.calibration import save_calibration
    from rebench.environments.registry import EnvironmentRegistry
    from rebench.store import Store

    with sqlite3.connect(kernel_first_run.db) as connection:
        (samples,), = connection.execute(
            "select samples from calibrations where environment = 'triton_cumsum' and profile = 'tiny'").fetchall()
    measured = json.loads(samples)
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    store = Store(db)
    try:
        save_calibration(store, env, profile, measured["start"], measured["reference"])
    finally:
        store.close()
    return db
