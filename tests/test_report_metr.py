"""`rebench report` on METR's public run file (imported once per module): files at every `--at`,
the headline table, runs above 2 counted once, and names kept whole at 80 columns and in a pipe."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from rebench.report.data import Filters
from rebench.report.service import make_report, settings_from_options
from rebench.report.terminal import print_terminal
from rebench.store import Store
from tests.conftest import run_main

METR_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"
REBENCH = str(Path(sys.executable).with_name("rebench"))  # the installed entry point, run as a user would
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl"),
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = str(tmp_path_factory.mktemp("metr") / "r.db")
    result = subprocess.run(
        [REBENCH, "import", "metr-runs", str(METR_FILE), "--db", path],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    yield path


@pytest.mark.parametrize("at", ["30m", "2h", "8h", "4h", "16h"])
def test_out_at_every_total(db: str, at: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / at
    code, _, err = run_main(["report", "--db", db, "--n-bootstrap", "100", "--at", at, "--out", str(out_dir)], capsys)
    assert code == 0, err
    names = {p.name for p in out_dir.iterdir()}
    assert {"report.html", "report.md", "score_at_k.csv", "score_vs_budget.png", f"per_environment_{at}.png"} <= names
    page = (out_dir / "report.html").read_text()
    start = page.index("best agent vs human experts by total time budget")
    headline = page[start : page.index("</table>", start)]
    assert headline.count("<tr>") == 5  # header and 2h, 8h, 16h, 32h
    assert "none has a score log" in headline  # no human data below 8 h, said in the table
    assert "yes (8h@1" in headline and "yes (8h@4" in headline


def test_runs_above_two_on_metr(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(db)
    try:
        report = make_report(store, Filters(), settings_from_options(n_bootstrap=100))
        excluded = make_report(store, Filters(), settings_from_options(n_bootstrap=100, exclude_above=2.0))
    finally:
        store.close()
    assert report is not None and excluded is not None
    above = {a.agent: a.above_2 for a in report.agents if a.above_2}
    assert above == {"human": 3, "o1-preview": 1}  # the human runs once each, not twice
    assert any(note.startswith("4 runs score above 2 (human 3, o1-preview 1)") for note in report.notes)
    for agent in above:
        summary = next(a for a in report.agents if a.agent == agent)
        again = next(a for a in excluded.agents if a.agent == agent)
        assert summary.score_without_above_2 == pytest.approx(again.score)
    assert max(r.best for r in excluded.rows) <= 2.0


def test_names_whole_at_80_columns_and_in_a_pipe(db: str) -> None:
    store = Store(db)
    try:
        report = make_report(store, Filters(), settings_from_options(n_bootstrap=20))
    finally:
        store.close()
    assert report is not None
    out = io.StringIO()
    print_terminal(report, Console(file=out, width=80, force_terminal=True, color_system=None), by_env=True)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    piped = subprocess.run(
        [REBENCH, "report", "--db", db, "--n-bootstrap", "20", "--by-env"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    ).stdout
    for text in (out.getvalue(), piped):
        for name in ("Claude 3.5 Sonnet (New)", "rust_codecontests_inference", "optimize_llm_foundry"):
            assert name in text
        assert "…" not in text
