"""Reference attempts on a model environment's `ci` profile, run once per test session and read by
every test that needs them, where two tests used to run the same attempts each:

- rust_codecontests_inference, two attempts (each generates with the trained model behind the
  gateway for three score calls: the start, the reference, the reference's held-out final):
  test_rust_env_model checks that both score the same, test_rust_heldout adds a fitted scaffold's
  attempt to a copy and reads the held-out gaps;
- nanogpt_chat_rl, one attempt (the reference's RL against the judge, then the same three score
  calls): test_chat_env_model checks its scores and meters, test_chat_heldout adds a fitted
  checkpoint's attempt to a copy.

The fixtures are function-scoped on purpose: pytest sets up a test's autouse fixtures first, so the
run happens inside the gate of the test that needs it first (tests/conftest.py: parallel_gate; the
rust tests are `one_core`), not beside an arbitrary test as a session fixture's would. The other
test waits on the lock and reads the record."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from .conftest import REPO, run_cli, shared_folder


@dataclass(frozen=True)
class ReferenceRuns:
    result: subprocess.CompletedProcess[str]
    db: Path

    def copy_to(self, target: Path) -> Path:
        """A copy of the database to add attempts to (the session's stays as it was)."""
        shutil.copyfile(self.db, target)
        return target


def reference_runs(tmp_path_factory: pytest.TempPathFactory, env: str, k: int, timeout: float) -> ReferenceRuns:
    """`rebench run --agent reference -k K` on ENV's ci profile (local backend), made by the first
    test of the session that asks; a failed run fails every test that reads it, with its stderr."""
    folder = shared_folder(tmp_path_factory, f"reference-runs-{env}")
    db, record = folder / "reference.db", folder / "result.json"
    with FileLock(str(folder / "lock")):
        if not record.exists():
            done = run_cli("run", "--env", env, "--profile", "ci", "--backend", "local", "--agent", "reference",
                           "--budget", "5m", "-k", str(k), "--db", str(db), timeout=timeout,
                           env={"REBENCH_ENVIRONMENTS": str(REPO / "environments")})
            record.write_text(json.dumps({"args": done.args, "returncode": done.returncode,
                                          "stdout": done.stdout, "stderr": done.stderr}))
    saved = json.loads(record.read_text())
    result = subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"], saved["stderr"])
    assert result.returncode == 0, result.stderr[-3000:]
    return ReferenceRuns(result, db)


@pytest.fixture
def rust_reference_runs(tmp_path_factory: pytest.TempPathFactory) -> ReferenceRuns:
    return reference_runs(tmp_path_factory, "rust_codecontests_inference", k=2, timeout=1800)


@pytest.fixture
def chat_reference_run(tmp_path_factory: pytest.TempPathFactory) -> ReferenceRuns:
    return reference_runs(tmp_path_factory, "nanogpt_chat_rl", k=1, timeout=900)
