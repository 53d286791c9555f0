"""The in-sandbox scoring helper, run as a real subprocess on real files."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURE_ENVS, REPO

HELPER = REPO / "rebench" / "scoring" / "score_helper.py"
KERNEL = REPO / "environments" / "triton_cumsum"


def run_helper(tmp_path: Path, program: Path, params: dict, timeout: float = 10) -> dict:
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps(params))
    out = tmp_path / "result.json"
    subprocess.run([sys.executable, str(HELPER), "--program", str(program), "--params", str(params_file),
                    "--out", str(out), "--log", str(tmp_path / "score.log"), "--timeout", str(timeout)],
                   check=True, timeout=timeout + 30)
    return json.loads(out.read_text())


@pytest.fixture
def counter(tmp_path: Path) -> dict:
    (tmp_path / "solution").mkdir()
    (tmp_path / "protected").mkdir()
    (tmp_path / "protected" / "answer.txt").write_text("42")
    return {"solution": str(tmp_path / "solution"), "protected": str(tmp_path / "protected"),
            "secret_file": "answer.txt"}


COUNTER_SCORE = FIXTURE_ENVS / "counter" / "scoring" / "score.py"


def test_valid_score_is_written_and_logged(tmp_path: Path, counter: dict) -> None:
    (tmp_path / "solution" / "value.txt").write_text("7.5")
    result = run_helper(tmp_path, COUNTER_SCORE, counter)
    assert result["raw"] == 7.5 and result["message"] == {"value": 7.5}
    assert result["details"]["secret"] == "42"
    rows = list(csv.reader((tmp_path / "score.log").open()))
    assert rows[0] == ["timestamp", "score", "message", "details"]
    assert float(rows[1][1]) == 7.5


def test_crashing_scorer_gives_invalid_not_a_crash(tmp_path: Path, counter: dict) -> None:
    (tmp_path / "solution" / "value.txt").write_text("crash")
    result = run_helper(tmp_path, COUNTER_SCORE, counter)
    assert result["raw"] is None
    assert "scorer crashed on purpose" in result["message"]["error"]


def test_timeout_gives_invalid_with_timeout_message(tmp_path: Path, counter: dict) -> None:
    (tmp_path / "solution" / "value.txt").write_text("sleep 30")
    result = run_helper(tmp_path, COUNTER_SCORE, counter, timeout=1)
    assert result["raw"] is None and result["message"] == {"timeout": True}
    assert result["duration_s"] < 10
    rows = list(csv.reader((tmp_path / "score.log").open()))
    assert rows[1][1] == "nan"


def test_nan_from_scorer_is_invalid(tmp_path: Path, counter: dict) -> None:
    (tmp_path / "solution" / "value.txt").write_text("nan")
    assert run_helper(tmp_path, COUNTER_SCORE, counter)["raw"] is None


KERNEL_PARAMS = {"device": "cpu", "n_elements": 20_000, "check_elements": 1024, "warmup_calls": 1,
                 "timed_calls": 3, "call_timeout_s": 20, "torch_threads": 1}


@pytest.mark.torch
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("return torch.cumsum(x, 0).to(torch.int32)", "wrong values"),
        ("return x.to(torch.int64)", "wrong dtype"),
        ("raise ValueError('nope')", "ValueError: nope"),
        ("return [1, 2, 3]", "expected a torch.Tensor"),
    ],
)
def test_kernel_scorer_rejects_wrong_answers(tmp_path: Path, body: str, expected: str) -> None:
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "solution.py").write_text(f"import torch\n\ndef prefix_sum(x):\n    {body}\n")
    result = run_helper(tmp_path, KERNEL / "scoring" / "score.py", {**KERNEL_PARAMS, "solution": str(solution)},
                        timeout=60)
    assert result["raw"] is None
    assert expected in result["message"]["error"]


@pytest.mark.torch
def test_kernel_scorer_times_out_a_slow_call(tmp_path: Path) -> None:
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "solution.py").write_text("import time\n\ndef prefix_sum(x):\n    time.sleep(60)\n")
    result = run_helper(tmp_path, KERNEL / "scoring" / "score.py",
                        {**KERNEL_PARAMS, "call_timeout_s": 1, "solution": str(solution)}, timeout=60)
    assert result["raw"] is None and result["message"]["timeout"] is True


@pytest.mark.torch
@pytest.mark.parametrize("source", ["workspace", "reference"])
def test_kernel_starting_and_reference_solutions_are_exact(tmp_path: Path, source: str) -> None:
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "solution.py").write_text((KERNEL / source / "solution.py").read_text())
    result = run_helper(tmp_path, KERNEL / "scoring" / "score.py", {**KERNEL_PARAMS, "solution": str(solution)},
                        timeout=60)
    assert result["raw"] is not None and result["message"]["correct"] is True
    assert len(result["details"]["times_ms"]) == 3
    assert result["message"]["harness_overhead_ms"] > 0, result
    # Nothing but Python's own bytecode cache is written beside the solution (no JIT cache: the
    # folder is the agent's submission, snapshotted at each score call).
    written = {path.suffix for path in solution.rglob("*") if path.is_file() and path.name != "solution.py"}
    assert written <= {".pyc"}, written


def test_profile_scoring_env_reaches_the_scoring_process(tmp_path: Path) -> None:
    program = tmp_path / "env_score.py"
    program.write_text("import os\n\ndef score(ctx):\n    return {'raw': float(os.environ['REBENCH_TEST_KNOB'])}\n")
    result = run_helper(tmp_path, program, {"scoring_env": {"REBENCH_TEST_KNOB": 2.5}})
    assert result["raw"] == 2.5


@pytest.mark.torch
def test_kernel_solution_runs_confined_away_from_the_protected_folder(tmp_path: Path) -> None:
    """Through the helper, the solution's process cannot open files under the protected
    folder, while the scorer that started it can, and it can write only in its own scratch
    folder (its TMPDIR): not in the solution nor beside it. /dev/shm it may use (semaphores and
    shared memory live there), and what it leaves there is gone when the child is closed."""
    from rebench.scoring.score_helper import confinement_unavailable

    assert confinement_unavailable() is None, "this kernel has no Landlock: the isolation tests cannot hold here"
    solution, protected = tmp_path / "solution", tmp_path / "protected"
    solution.mkdir()
    protected.mkdir()
    (protected / "secret.txt").write_text("held out")
    reference = (KERNEL / "reference" / "solution.py").read_text()
    # Any success below makes the import fail, and so the score invalid.
    peek = "".join(
        f"try:\n    open({path!r}, {mode!r}).close()\n    raise RuntimeError('opened ' + {path!r})\n"
        "except PermissionError:\n    pass\n"
        for path, mode in ((str(protected / "secret.txt"), "r"), (str(solution / "peek.txt"), "w"),
                           (str(tmp_path / "left.txt"), "w")))
    peek += "import os, tempfile\nopen(os.path.join(tempfile.gettempdir(), 'own.txt'), 'w').write('scratch')\n"
    shared = f"/dev/shm/rebench-peek-{os.getpid()}"
    peek += f"open({shared!r}, 'w').write('left in shared memory')\n"
    (solution / "solution.py").write_text(reference + "\n" + peek)
    result = run_helper(tmp_path, KERNEL / "scoring" / "score.py",
                        {**KERNEL_PARAMS, "solution": str(solution), "protected": str(protected)}, timeout=60)
    assert result["raw"] is not None, result
    assert result["details"]["solution_confined"] is True
    assert not (solution / "peek.txt").exists() and not (tmp_path / "left.txt").exists()
    assert not os.path.exists(shared), "the child's shared-memory file outlived it"
