"""A report over a real own attempt: the session's kernel attempt (tests/conftest.py: `kernel_first_run`), then
`rebench report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import RecordedRun, run_main


@pytest.mark.slow
@pytest.mark.torch
def test_report_reads_a_real_attempt_and_its_score_log(tmp_path: Path, kernel_first_run: RecordedRun,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The session's first kernel attempt (tests/conftest.py: `kernel_first_run`, the README's main
    job: tiny, a 10-minute budget), read from a copy of its database: its final score is normalized
    with the window anchors measured beside its re-scores."""
    pytest.importorskip("torch")
    db = str(kernel_first_run.copy_to(tmp_path / "rebench.db"))
    code, out, err = run_main(["report", "--db", db, "--budgets", "1s,10m,20m", "--n-bootstrap", "50", "--json"],
                              capsys)
    assert code == 0, err
    rows = {(r["environment"], r["total_s"]): r for r in json.loads(out) if r["agent"] == "reference"}
    whole, double = rows[("triton_cumsum", 600.0)], rows[("triton_cumsum", 1200.0)]
    assert whole["k"] == 1 and whole["source"] == "own" and whole["n"] == 1
    assert whole["point"] == pytest.approx(whole["mean"]) and whole["mean"] > 0
    assert whole["anchors"] == "window"  # tiny re-scores its timings beside the start and the reference
    assert double["k"] == 2 and double["point"] == pytest.approx(whole["point"])  # one run: the max is itself
    cut = rows[("triton_cumsum", 1.0)]  # cut to the first second: nothing scored yet
    assert cut["truncated"] and cut["point"] == 0.0
