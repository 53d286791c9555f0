"""Reference attempts on a model environment's `ci` profile, run once per test session
(`recorded_run`, as the kernel's first run is) and read by every test that needs them, where two
tests used to run the same attempts each:

- rust_codecontests_inference, two attempts (each generates with the trained model behind the
  gateway for three score calls: the start, the reference, the reference's held-out final):
  test_rust_env_model checks that both score the same, test_rust_heldout adds a fitted scaffold's
  attempt to a copy and reads the held-out gaps;
- nanogpt_chat_rl, one attempt (the reference's RL against the judge, then the same three score
  calls): test_chat_env_model checks its scores and meters, test_chat_heldout adds a fitted
  checkpoint's attempt to a copy.

The fixtures are function-scoped on purpose: pytest sets up a test's autouse fixtures first, so the
run happens inside the gate of the test that needs it first (tests/conftest.py: parallel_gate; the
rust tests are `one_core`), not beside an arbitrary test as a session fixture's would."""

from __future__ import annotations

import pytest

from .conftest import RecordedRun, recorded_run, shared_folder


def _reference_runs(tmp_path_factory: pytest.TempPathFactory, env: str, k: int, timeout: float) -> RecordedRun:
    return recorded_run(shared_folder(tmp_path_factory, f"reference-runs-{env}"), "--env", env, "--profile", "ci",
                        "--backend", "local", "--agent", "reference", "--budget", "5m", "-k", str(k), timeout=timeout)


@pytest.fixture
def rust_reference_runs(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return _reference_runs(tmp_path_factory, "rust_codecontests_inference", k=2, timeout=1800)


@pytest.fixture
def chat_reference_run(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    return _reference_runs(tmp_path_factory, "nanogpt_chat_rl", k=1, timeout=900)
