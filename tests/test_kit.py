"""The environment kit (rebench/kit): what it needs, where each backend puts it, that scorers
import that copy, that its version rebuilds environments, and the confined-child plumbing."""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from rebench import harness_files
from rebench.environments.install import PARAMS_FILE, SCORING_DIR
from rebench.environments.registry import EnvironmentRegistry
from rebench.kit.confined import OUTPUT_TAIL_BYTES, ChildFailed, ChildTimeout, ConfinedChild
from rebench.sandbox.base import Sandbox, SandboxSpec
from rebench.sandbox.local import LocalSandbox
from rebench.scoring.run import run_scoring

from .docker_support import base_image, docker_engine, with_sandbox

REPO = Path(__file__).resolve().parents[1]

# A scoring program that reports which kit it imported (and that it imported nothing else).
KIT_PROBE = """
import rebench.kit.confined
import rebench.kit.context


def score(ctx):
    return {"raw": 1.0, "message": {"kit": rebench.kit.confined.__file__}}
"""


def test_the_scoring_time_kit_needs_only_the_standard_library(tmp_path: Path) -> None:
    """Scorers run in whatever Python an environment has: the kit's scoring part, imported from
    a harness folder without site-packages, pulls in nothing outside the standard library."""
    harness_files.install_harness(tmp_path)
    probe = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import rebench.kit.confined, rebench.kit.context
        loaded = {{name.split(".")[0] for name in sys.modules}}
        outside = sorted(loaded - set(sys.stdlib_module_names) - {{"rebench", "__main__"}})
        print(rebench.kit.confined.__file__, outside)
        try:
            import numpy
        except ImportError:
            print("no numpy")
    """)
    out = subprocess.run([sys.executable, "-S", "-E", "-s", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == [f"{tmp_path}/rebench/kit/confined.py []", "no numpy"], out


def test_the_kit_imports_nothing_else_of_rebench() -> None:
    """In a sandbox the kit is all of rebench there is (beside a stub package)."""
    outside = []
    for path in (REPO / "rebench" / "kit").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            outside += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "rebench" and
                        not n.startswith("rebench.kit")]
    assert outside == []


def test_the_harness_folder_holds_the_helper_the_kit_and_a_stub_package(tmp_path: Path) -> None:
    harness_files.install_harness(tmp_path)
    kit = sorted(p.name for p in (REPO / "rebench" / "kit").glob("*.py"))
    assert sorted(p.name for p in (tmp_path / "rebench" / "kit").iterdir()) == kit
    assert (tmp_path / "score_helper.py").read_bytes() == harness_files.HELPER.read_bytes()
    stub = (tmp_path / "rebench" / "__init__.py").read_text()
    assert "import" not in stub  # `import rebench.kit` must need nothing else of rebench
    assert all(not p.stat().st_mode & 0o222 for p in tmp_path.rglob("*.py"))


def test_changing_the_kit_changes_every_environments_content_hash(tmp_path: Path, monkeypatch) -> None:
    envs = EnvironmentRegistry(REPO / "environments").all()
    before = {env.name: env.content_hash("tiny") for env in envs}
    kit = tmp_path / "kit"
    shutil.copytree(REPO / "rebench" / "kit", kit, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(harness_files, "KIT", kit)
    assert {env.name: env.content_hash("tiny") for env in envs} == before  # same files, same hash
    with (kit / "corpus.py").open("a") as handle:
        handle.write("\n# a change\n")
    after = {env.name: env.content_hash("tiny") for env in envs}
    assert all(after[name] != before[name] for name in before), (before, after)


async def _score_with(sandbox: Sandbox, program: str) -> Any:
    paths = sandbox.paths
    await sandbox.write_file(paths.in_protected(SCORING_DIR, "score.py"), program.encode(), user="root", mode=0o644)
    await sandbox.write_file(paths.in_protected(PARAMS_FILE), json.dumps({"protected": paths.protected}).encode(),
                             user="root", mode=0o644)
    # An agent's package of the same name in its home (the scorer's working folder) must not win.
    await sandbox.write_file(paths.in_home("rebench", "kit", "confined.py"), b"raise SystemExit('planted')\n")
    await sandbox.write_file(paths.in_home("rebench", "__init__.py"), b"")
    await sandbox.write_file(paths.in_home("rebench", "kit", "__init__.py"), b"")
    return await run_scoring(sandbox, 60)


def test_the_local_backend_lays_out_the_kit_and_its_scorer_imports_that_copy(tmp_path: Path) -> None:
    async def body() -> tuple[Any, Any]:
        sandbox = LocalSandbox(SandboxSpec(attempt_id=0, environment="test", profile="tiny"), tmp_path / "root",
                               python=sys.executable)
        await sandbox.start()
        try:
            result = await _score_with(sandbox, KIT_PROBE)
            by_hand = await sandbox.exec([sys.executable, "-c", "import rebench.kit.context as c; print(c.__file__)"])
            return result, by_hand
        finally:
            await sandbox.stop()

    result, by_hand = asyncio.run(body())
    folder = tmp_path / "root" / "rebench"
    assert result.raw == 1.0 and result.message["kit"] == f"{folder}/rebench/kit/confined.py", result
    assert by_hand.stdout.strip() == f"{folder}/rebench/kit/context.py", by_hand


@pytest.mark.docker
def test_the_docker_image_holds_the_kit_read_only_and_its_scorer_imports_that_copy() -> None:
    image = base_image(docker_engine())

    async def body(sandbox: Any) -> tuple[Any, ...]:
        owners = await sandbox.exec("stat -c '%U %a' /opt/rebench/rebench/kit/confined.py", user="root")
        write = await sandbox.exec("echo x >> /opt/rebench/rebench/kit/confined.py")
        by_hand = await sandbox.exec(["python", "-c", "import rebench.kit.context as c; print(c.__file__)"])
        return owners, write, by_hand, await _score_with(sandbox, KIT_PROBE)

    owners, write, by_hand, result = with_sandbox(image, body)
    assert owners.stdout.strip() == "root 755"
    assert write.exit_code != 0 and "Permission denied" in write.stderr
    assert by_hand.stdout.strip() == "/opt/rebench/rebench/kit/context.py", by_hand
    assert result.raw == 1.0 and result.message["kit"] == "/opt/rebench/rebench/kit/confined.py", result


# -- the confined-child plumbing (no confine_command: the plumbing, not the confinement) --------

ECHO_WORKER = """
import json, os, sys
read_fd, write_fd = int(sys.argv[1]), int(sys.argv[2])
inbox, outbox = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")
for line in inbox:
    if not line.strip():
        break
    message = json.loads(line)
    if message.get("print"):
        for i in range(message["print"]):
            print(f"line {i}", flush=False)
        sys.stdout.flush()
    if message.get("die"):
        print("about to quit", flush=True)
        os._exit(message["die"])
    if message.get("garbage"):
        outbox.write(b"not json\\n"); outbox.flush(); continue
    if message.get("silent"):
        continue
    data = message.get("bytes", "").encode()
    outbox.write(json.dumps({"echo": message, "nbytes": len(data)}).encode() + b"\\n" + data)
    outbox.flush()
"""


@pytest.fixture
def child(tmp_path: Path) -> Any:
    started = ConfinedChild({}, ECHO_WORKER, [], cwd=str(tmp_path), name="the test child")
    yield started
    started.close()


def test_a_reply_and_its_bytes_come_back(child: ConfinedChild) -> None:
    child.send({"bytes": "x" * 100_000})
    reply = child.receive(10, max_payload_bytes=100_000)
    assert reply["echo"] == {"bytes": "x" * 100_000} and reply["payload"] == b"x" * 100_000
    assert child.confined is False  # no launcher reported Landlock active


def test_a_payload_larger_than_allowed_is_refused_unread(child: ConfinedChild) -> None:
    child.send({"bytes": "x" * 100})
    with pytest.raises(ChildFailed, match="announced 100 bytes; at most 10 are allowed"):
        child.receive(10, max_payload_bytes=10)


def test_the_output_is_kept_to_one_tail(child: ConfinedChild) -> None:
    child.send({"print": 20_000})
    child.receive(10)
    child.close()
    tail = child.output_tail()
    assert len(tail.encode()) == OUTPUT_TAIL_BYTES and tail.endswith("line 19999\n"), tail[-100:]


def test_a_child_that_dies_is_reported_with_its_exit_status_and_output(child: ConfinedChild) -> None:
    child.send({"die": 3})
    with pytest.raises(ChildFailed, match="the test child exited with 3: about to quit"):
        child.receive(10)


def test_a_silent_child_times_out_and_a_malformed_reply_fails(child: ConfinedChild) -> None:
    child.send({"silent": True})
    started = time.monotonic()
    with pytest.raises(ChildTimeout, match=r"longer than 0\.3 s"):
        child.receive(0.3)
    assert time.monotonic() - started < 2
    child.send({"garbage": True})
    with pytest.raises(ChildFailed, match="malformed reply: b'not json'"):
        child.receive(10)


def test_the_confinement_banner_is_read_from_the_first_line(tmp_path: Path) -> None:
    worker = "import sys; print('rebench-confine: active', file=sys.stderr, flush=True)"
    child = ConfinedChild({}, worker, [], cwd=str(tmp_path))
    child.close()
    assert child.confined is True and child.output_tail() == "rebench-confine: active\n"


def test_nothing_in_the_agents_folder_runs_before_the_worker_imports_it(tmp_path: Path) -> None:
    """The child starts in the agent's folder; a module there named like one the worker imports
    first (here `json`) must not be what it gets, or the agent's code would run before the worker
    has set up what must come first (the kernel worker's SIGCHLD guard)."""
    (tmp_path / "json.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    child = ConfinedChild({}, ECHO_WORKER, [], cwd=str(tmp_path))
    try:
        child.send({"bytes": "ok"})
        assert child.receive(10, max_payload_bytes=2)["payload"] == b"ok"
    finally:
        child.close()
    assert not (tmp_path / "ran").exists()


NEIGHBOUR = """
import mmap, os, sys
path = sys.argv[1]
with open(path, "w+b") as handle:
    handle.truncate(4096)
    mapped = mmap.mmap(handle.fileno(), 4096)
print(path, flush=True)
sys.stdin.read()  # holds the mapping until the test closes its stdin
"""

SEMAPHORE_NEIGHBOUR = """
import multiprocessing, sys
lock = multiprocessing.get_context("spawn").Lock()  # a named POSIX semaphore, as a pool's
print("/dev/shm/sem." + lock._semlock.name.lstrip("/"), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("neighbour_source", [NEIGHBOUR, SEMAPHORE_NEIGHBOUR], ids=["mapped-file", "semaphore"])
def test_closing_a_child_keeps_shared_memory_another_process_still_maps(tmp_path: Path, neighbour_source: str) -> None:
    """Closing a child used to remove every /dev/shm entry made during the call, also a semaphore a
    parallel build of the same user had just made (its tokenizer pool then failed); then every named
    semaphore still, found by name in the memory maps, where sem_open's maker maps it under another
    name (the pool restarted its workers forever). What the child left, mapped by nobody, still goes."""
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    tag = uuid.uuid4().hex[:12]
    lefts = Path(f"/dev/shm/rebench-test-left-{tag}")
    worker = f"open({str(lefts)!r}, 'w').write('left by the child')"
    child = ConfinedChild({}, worker, [], cwd=str(tmp_path))
    neighbour = subprocess.Popen([sys.executable, "-c", neighbour_source, f"/dev/shm/rebench-test-neighbour-{tag}"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    neighbours = None
    try:
        assert neighbour.stdout is not None
        line = neighbour.stdout.readline().strip()  # empty if the neighbour failed
        assert line.startswith("/dev/shm/"), line
        neighbours = Path(line)
        assert neighbours.exists(), neighbours
        child.close()
        assert neighbours.exists(), "a parallel process's shared memory was removed"
        assert not lefts.exists(), "what the child left in /dev/shm outlived the call"
    finally:
        neighbour.communicate(timeout=10)
        if neighbours is not None and neighbours.name.startswith("rebench-test-"):
            neighbours.unlink(missing_ok=True)
        lefts.unlink(missing_ok=True)
