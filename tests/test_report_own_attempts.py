"""A report over a real own attempt: the runner on the kernel environment (its `ci` profile), then `rebench report`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebench.cli.app import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.torch
def test_report_reads_a_real_attempt_and_its_score_log(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel's `ci` profile (tiny's task, two re-score rounds) without measuring anchors first: the
    final score is normalized with the window anchors measured beside its re-scores either way. One
    score call is enough for the report."""
    pytest.importorskip("torch")
    db = str(tmp_path / "rebench.db")
    argv = ["run", "--env", "triton_cumsum", "--profile", "ci", "--agent", "reference", "--agent-arg", "repeats=1",
            "--budget", "3m", "--backend", "local", "--no-calibrate"]
    code, _ = _run([*argv, "--db", db], capsys)
    assert code == 0
    code, out = _run(["report", "--db", db, "--budgets", "1s,3m,6m", "--n-bootstrap", "50", "--json"], capsys)
    assert code == 0
    rows = {(r["environment"], r["total_s"]): r for r in json.loads(out) if r["agent"] == "reference"}
    whole, double = rows[("triton_cumsum", 180.0)], rows[("triton_cumsum", 360.0)]
    assert whole["k"] == 1 and whole["source"] == "own" and whole["n"] == 1
    assert whole["point"] == pytest.approx(whole["mean"]) and whole["mean"] > 0
    assert whole["anchors"] == "window"  # ci re-scores its timings beside the start and the reference
    assert double["k"] == 2 and double["point"] == pytest.approx(whole["point"])  # one run: the max is itself
    cut = rows[("triton_cumsum", 1.0)]  # cut to the first second: nothing scored yet
    assert cut["truncated"] and cut["point"] == 0.0
