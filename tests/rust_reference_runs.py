"""Two reference attempts on rust_codecontests_inference's `ci` profile, run once per test session
and read by the tests that need them (test_rust_env_model checks that both score the same;
test_rust_heldout adds a fitted scaffold's attempt to a copy and reads the held-out gaps). Each
attempt generates with the trained model behind the gateway for three score calls (the start, the
reference, the reference's held-out final), the most expensive calls of the suite after the kernel's
calibration, so two tests running the same attempts was CPU spent twice.

The fixture is function-scoped on purpose: pytest sets up a test's autouse fixtures first, so the
run happens inside the test's `one_core` gate (tests/conftest.py: parallel_gate), not beside an
arbitrary test as a session fixture's would."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from .conftest import REPO, run_cli, shared_folder

ENV = "rust_codecontests_inference"


@dataclass(frozen=True)
class RustReferenceRuns:
    result: subprocess.CompletedProcess[str]
    db: Path

    def copy_to(self, target: Path) -> Path:
        """A copy of the database to add attempts to (the session's stays as it was)."""
        shutil.copyfile(self.db, target)
        return target


@pytest.fixture
def rust_reference_runs(tmp_path_factory: pytest.TempPathFactory) -> RustReferenceRuns:
    folder = shared_folder(tmp_path_factory, "rust-reference-runs")
    db, record = folder / "rust.db", folder / "result.json"
    with FileLock(str(folder / "lock")):
        if not record.exists():
            done = run_cli("run", "--env", ENV, "--profile", "ci", "--backend", "local", "--agent", "reference",
                           "--budget", "5m", "-k", "2", "--db", str(db), timeout=1800,
                           env={"REBENCH_ENVIRONMENTS": str(REPO / "environments")})
            record.write_text(json.dumps({"args": done.args, "returncode": done.returncode,
                                          "stdout": done.stdout, "stderr": done.stderr}))
    saved = json.loads(record.read_text())
    result = subprocess.CompletedProcess(saved["args"], saved["returncode"], saved["stdout"], saved["stderr"])
    assert result.returncode == 0, result.stderr[-3000:]
    return RustReferenceRuns(result, db)
