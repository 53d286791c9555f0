"""`rebench rescore` of a hostile snapshot: the folder an agent left is laid into a fresh sandbox
and scored again, long after the attempt. Whatever the folder holds, the re-score reads and writes
nothing outside that sandbox and ends with an honest result or a one-line error.

Two kinds of snapshot. What an agent makes through the Docker sandbox (its solution folder at the
attempt's end: link loops, links to folders, hard links, files named like the scorer's): that is
taken by the snapshot copy's rules (tests/adversarial/test_snapshot_bounds.py) and must then be
re-scored as a solution, never as the scorer. And a snapshot folder on the host holding what that
copy never makes (links out, hard links to host files, a FIFO, a device, a socket, a 100 GB sparse
file): on the local backend the agent runs as the harness's user and can leave them there
(tests/adversarial/test_rescore_snapshots.py), and re-scoring must refuse such a folder whatever
made it. Real CLI, real SQLite; the local cases on the `counter` fixture, the Docker ones on `vault`.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from ..conftest import FIXTURE_ENVS, REPO, run_cli

RESCORE_TIMEOUT_S = int(os.environ.get("HOSTILE_TIMEOUT", "60"))
FORGED = "31337"
"""What a host file the snapshot points at holds: a re-score of 31337 means it was read."""


def _rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def _local_attempt(tmp_path: Path, db: Path, bash: str) -> Path:
    """One finished `counter` attempt (local backend) whose agent ran `bash` in its solution folder;
    the host folder of its final snapshot."""
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "5"}}, {"bash": bash}, {"score": {}}, {"submit": None}]}))
    ran = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--budget", "1m",
                  "--backend", "local", "--db", str(db), "--no-calibrate")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (snapshot,), = _rows(db, "select snapshot_path from attempts")
    return Path(snapshot)


def _rescore_local(db: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db), timeout=RESCORE_TIMEOUT_S)


@pytest.fixture(scope="module")
def honest_attempt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """One honest finished attempt (value.txt = 5) shared by the crafted cases: (database, snapshot
    folder, environments)."""
    folder = tmp_path_factory.mktemp("honest")
    envs = folder / "envs"
    shutil.copytree(FIXTURE_ENVS, envs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REBENCH_ENVIRONMENTS", str(envs))
        snapshot = _local_attempt(folder, folder / "rebench.db", "true")
    return folder / "rebench.db", snapshot, envs


def _copy_attempt(honest: tuple[Path, Path, Path], tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A private copy of the honest attempt's database and snapshot folder (the row points at the copy)."""
    source_db, source_snapshot, envs = honest
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(envs))
    db, snapshot = tmp_path / "rebench.db", tmp_path / "snapshots" / "attempt-1"
    shutil.copytree(source_snapshot, snapshot, symlinks=True)
    with sqlite3.connect(source_db) as source, sqlite3.connect(db) as copy:
        source.backup(copy)
        copy.execute("update attempts set snapshot_path = ?", (str(snapshot),))
    return db, snapshot


@pytest.mark.adversarial
@pytest.mark.slow
def test_link_loops_and_folder_links_are_restored_as_links(fixture_envs: Path, tmp_path: Path,
                                                          db_path: Path) -> None:
    """`a -> .` and `b -> .` stay inside the folder, so the snapshot keeps them. The local restore
    followed every link to a folder: 2^40 copies of the solution (the kernel stops a path at 40
    links), a re-score that never ended and filled the disk. Restored as links, as on Docker."""
    snapshot = _local_attempt(tmp_path, db_path, 'cd "$REBENCH_SOLUTION" && ln -s . a && ln -s . b && mkdir sub '
                                                 '&& echo inner > sub/x && ln -s sub d && ln sub/x hard')
    assert os.readlink(snapshot / "a") == "." and os.readlink(snapshot / "d") == "sub"
    result = _rescore_local(db_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _rows(db_path, "select status, final_raw from rescores") == [("done", 5.0)]


def _host_secret(tmp_path: Path) -> Path:
    """A file outside the snapshot standing for the user's own (~/.ssh, a token): it reads 1000."""
    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text(FORGED)
    return secret


def _absolute_link(snapshot: Path, tmp_path: Path, db: Path) -> str:
    (snapshot / "value.txt").unlink()
    (snapshot / "value.txt").symlink_to(_host_secret(tmp_path))
    return "value.txt"


def _relative_link(snapshot: Path, tmp_path: Path, db: Path) -> str:
    (snapshot / "value.txt").unlink()
    (snapshot / "value.txt").symlink_to(os.path.relpath(_host_secret(tmp_path), snapshot))
    return "value.txt"


def _link_to_the_store(snapshot: Path, tmp_path: Path, db: Path) -> str:
    (snapshot / "value.txt").unlink()
    (snapshot / "value.txt").symlink_to(os.path.relpath(db, snapshot))
    return "value.txt"


def _folder_link(snapshot: Path, tmp_path: Path, db: Path) -> str:
    """The snapshot folder itself a link to a host folder (where the secret lies as value.txt)."""
    host = _host_secret(tmp_path).parent
    (host / "value.txt").write_text(FORGED)
    shutil.rmtree(snapshot)
    snapshot.symlink_to(host, target_is_directory=True)
    return str(snapshot)


def _hard_link(snapshot: Path, tmp_path: Path, db: Path) -> str:
    (snapshot / "value.txt").unlink()
    os.link(_host_secret(tmp_path), snapshot / "value.txt")
    return "value.txt"


def _fifo(snapshot: Path, tmp_path: Path, db: Path) -> str:
    os.mkfifo(snapshot / "a_pipe")
    return "a_pipe"


def _socket(snapshot: Path, tmp_path: Path, db: Path) -> str:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(snapshot / "a_sock"))
    return "a_sock"


def _device(snapshot: Path, tmp_path: Path, db: Path) -> str:
    """A character device like /dev/zero (1, 5): endless bytes to whoever reads it."""
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    (snapshot / "value.txt").unlink()
    os.mknod(snapshot / "value.txt", stat.S_IFCHR | 0o644, os.makedev(1, 5))
    return "value.txt"


def _sparse(snapshot: Path, tmp_path: Path, db: Path) -> str:
    """100 GB that take no disk here, and 100 GB on any copy made by reading it."""
    with open(snapshot / "huge.bin", "wb") as handle:
        handle.truncate(100 * 10**9)
    return "huge.bin"


CRAFTED: dict[str, Callable[[Path, Path, Path], str]] = {
    "absolute link": _absolute_link, "relative link": _relative_link, "link to the store": _link_to_the_store,
    "folder link": _folder_link, "hard link": _hard_link, "fifo": _fifo, "socket": _socket, "device": _device,
    "sparse 100 GB": _sparse,
}


@pytest.mark.adversarial
@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CRAFTED))
def test_a_crafted_host_snapshot_is_refused(kind: str, honest_attempt: tuple[Path, Path, Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the links and the hard link were followed on the host (a re-score of 31337 read from
    the host file; the store's first bytes in the score's message), the FIFO, the device and the
    sparse file hung the plan's digest (which would have read 100 GB, and the copy written them),
    the socket ended in a traceback. Now the folder is checked without following anything or
    opening a file: one line naming the entry, nothing written."""
    db_path, snapshot = _copy_attempt(honest_attempt, tmp_path, monkeypatch)
    entry = CRAFTED[kind](snapshot, tmp_path, db_path)
    try:
        result = _rescore_local(db_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind}: rescore still running after {RESCORE_TIMEOUT_S} s")
    shown = result.stdout + result.stderr
    assert result.returncode != 0, shown
    assert FORGED not in shown and "SQLite format" not in shown, shown
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1 and entry in error and "cannot be restored" in error, error
    assert "Traceback" not in shown
    assert _rows(db_path, "select count(*) from rescores") == [(0,)]
    assert _rows(db_path, "select count(*) from rescore_runs") == [(0,)]


# -- Docker: what an agent makes through the sandbox ---------------------------------------------
FORGE = """import json as _json
_dump = _json.dump
def _forged(obj, fp, *args, **kwargs):
    if isinstance(obj, dict) and "raw" in obj:
        obj["raw"] = 1.0
    return _dump(obj, fp, *args, **kwargs)
_json.dump = _forged
def score(ctx):
    return {"raw": 1.0, "message": {}, "details": {}}
if __name__ == "__main__":
    import sys
    nonce = sys.stdin.readline().strip()
    if "--out" in sys.argv:
        with open(sys.argv[sys.argv.index("--out") + 1], "w") as out:
            out.write(_json.dumps({"raw": 1.0, "nonce": nonce, "message": {}, "details": {}}))
"""
"""Any Python file of the agent's that the scorer runs or imports makes the result 1.0."""

HOSTILE = r"""
set -u
cd /home/agent/solution
echo wrong > answer.txt
ln -s . a && ln -s . b && mkdir -p sub && echo inner > sub/x && ln -s sub d && ln sub/x hard
echo mine > ~/mine.txt && ln ~/mine.txt mine_hard
for name in sitecustomize.py usercustomize.py score.py score_helper.py forge.py rebench/__init__.py \
            rebench/kit/__init__.py rebench/kit/landlock.py rebench/kit/confined.py scoring/score.py; do
    mkdir -p "$(dirname "$name")" && cat > "$name" <<'EOF'
__FORGE__
EOF
done
echo 'import forge' > zz_forge.pth
echo '{"raw": 1.0, "nonce": "", "message": {}, "details": {}}' > result.json
cp result.json params.json
for source in /opt/rebench/score_helper.py /protected/scoring/score.py /etc/passwd; do
    ln "$source" "linked_$(basename "$source")" 2>/dev/null && echo "linked $source"
done
true
""".replace("__FORGE__", FORGE)


def _docker_rescore(db: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "rescore", "--attempt", "1", "--backend",
                             "docker", "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env, "COLUMNS": "200"}, cwd=REPO)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _leaked(engine: object, pid: int) -> list[str]:
    from rebench.sandbox.docker import LABEL_OWNER

    prefix = f"{socket.gethostname()}:{pid}:"
    return [name for _id, name, _status, labels in engine.containers()  # type: ignore[attr-defined]
            if labels.get(LABEL_OWNER, "").startswith(prefix)]


@pytest.mark.adversarial
@pytest.mark.docker
@pytest.mark.slow
def test_docker_rescore_of_a_hostile_workspace_is_honest(tmp_path: Path) -> None:
    """Through the sandbox: link loops, a link to a folder, hard links, and files named like the
    scorer's (score.py, score_helper.py, rebench/kit/*, sitecustomize.py, a .pth, result.json), each
    forging 1.0 if it ever runs as the scorer. The re-score runs none of them: the wrong answer
    scores 0. Then the host folder crafted as the agent would wish (answer.txt a link to the held-out
    word): refused, where before it was restored into the sandbox and the scorer read the secret."""
    from ..docker_support import base_image, docker_engine
    from ..test_docker_security import FIXTURES, cli

    engine = docker_engine()
    base_image(engine)
    env = {"REBENCH_ENVIRONMENTS": str(FIXTURES)}
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [{"bash": HOSTILE}, {"score": {}}, {"submit": None}]}))
    db = tmp_path / "rebench.db"
    ran = cli("run", "--env", "vault", "--agent", "replay", "--agent-arg", f"script={script}", "--profile", "tiny",
              "--budget", "3m", "--backend", "docker", "--db", str(db), env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (snapshot_path, raw), = _rows(db, "select snapshot_path, final_raw from attempts")
    snapshot = Path(snapshot_path)
    assert raw == 0.0 and os.readlink(snapshot / "a") == "." and (snapshot / "score_helper.py").is_file()
    assert not list(snapshot.glob("linked_*")), "a hard link to a file of root's was made"
    result, pid = _docker_rescore(db, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _rows(db, "select status, final_raw from rescores") == [("done", 0.0)]
    assert not _leaked(engine, pid)

    (snapshot / "answer.txt").unlink()
    (snapshot / "answer.txt").symlink_to("/protected/secret.txt")
    result, pid = _docker_rescore(db, env)
    error = result.stderr.strip()
    assert result.returncode != 0 and len(error.splitlines()) == 1, result.stdout + result.stderr
    assert "answer.txt" in error and "cannot be restored" in error, error
    assert _rows(db, "select status, final_raw from rescores") == [("done", 0.0)]
    assert not _leaked(engine, pid)
