"""benchmarks/gpu_validation.py, the `paper` profiles built and scored from stand-ins, in its --cpu
form: run here so the script a GPU session runs cannot rot unnoticed (docs/gpu-validation.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rebench.environments.registry import EnvironmentRegistry

from .conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.torch]

NOT_FAILURES = {"ok", "skipped", "unwritten", "offline"}
"""The statuses a row may have in a run that exits 0 (gpu_validation.Row)."""


def test_cpu_run_exits_0_with_a_row_for_every_paper_profile() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    pytest.importorskip("transformers")
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_validation", "--cpu"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()
             if line.startswith("| ") and not line.startswith("| environment ")]
    rows = {cells[0]: cells for cells in cells}
    papers = {env.name for env in EnvironmentRegistry().all() if "paper" in env.metadata.profiles}
    assert set(rows) == papers, done.stdout
    for name, cells in rows.items():
        assert cells[6].split(":")[0] in NOT_FAILURES, (name, cells)
    assert rows["triton_cumsum"][6].startswith("ok: in use: torch "), rows["triton_cumsum"]
    assert rows["triton_cumsum"][1] == "cpu" and rows["triton_cumsum"][2] != "-"
