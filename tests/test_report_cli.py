"""`rebench import metr-runs` and `rebench report` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_main

METR_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"
ALIASES = {
    "o1-preview",
    "o1",
    "Claude 3.5 Sonnet (New)",
    "Claude 3.5 Sonnet (Old)",
    "Claude 3 Opus",
    "GPT-4o",
    "GPT-4 Turbo",
    "GPT-4 0314",
}


@pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl")
def test_import_then_report_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    code, out, _ = run_main(["import", "metr-runs", str(METR_FILE), "--db", db], capsys)
    assert code == 0 and "imported 1808 RE-Bench runs" in out
    code, out, _ = run_main(["import", "metr-runs", str(METR_FILE), "--db", db, "--json"], capsys)
    assert code == 0 and json.loads(out)["added"] == 0

    code, out, _ = run_main(["report", "--db", db, "--source", "imported", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    assert {(r["estimator"], r["n_bootstrap"], r["seed"]) for r in rows} == {("expected_max", 1000, 0)}
    overall = [r for r in rows if r["environment"] == "all"]
    assert {r["agent"] for r in overall} == ALIASES | {"human"}
    assert {r["source"] for r in overall} == {"imported"}
    human_8h = next(r for r in overall if r["agent"] == "human" and r["total_s"] == 28800)
    assert human_8h["k"] == 1 and human_8h["envs"] == 7
    assert human_8h["low"] <= human_8h["point"] <= human_8h["high"]
    assert human_8h["human_percentile"] is None  # humans are the yardstick, not placed on it
    o1p = next(r for r in overall if r["agent"] == "o1-preview" and r["budget_s"] == 1800 and r["total_s"] == 28800)
    assert o1p["k"] == 16 and o1p["best_allocation"] and 0 < o1p["human_percentile"] < 100
    kernel = next(r for r in rows if r["agent"] == "GPT-4o" and r["environment"] == "triton_cumsum" and r["k"] == 1)
    assert kernel["n"] == 32 and kernel["point"] == pytest.approx(kernel["mean"])  # k = 1 is the mean
    assert kernel["anchors"] == "imported"

    argv = ["report", "--db", db, "--source", "imported", "--n-bootstrap", "200", "--seed", "5"]
    code, out, _ = run_main(argv, capsys)
    assert code == 0
    assert "200 resamples" in out and "seed 5" in out and "GPT-4 0314" in out and "human" in out
    assert "standing among human experts" in out and "0.64" in out  # the paper's figure, next to ours

    out_dir = tmp_path / "html"
    code, out, _ = run_main(["report", "--db", db, "--env", "triton_cumsum", "--out", str(out_dir)], capsys)
    assert code == 0 and (out_dir / "report.html").is_file() and (out_dir / "score_at_k.csv").is_file()


def test_bad_options_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rebench.store.db import Store

    db = str(tmp_path / "r.db")
    Store(db).close()
    for argv, expected in (
        (["report", "--db", db, "--source", "theirs"], "unknown source 'theirs'; allowed: own, imported"),
        (["report", "--db", db, "--estimator", "median"], "unknown estimator 'median'"),
        (["report", "--db", db, "--budgets", "8"], "invalid duration '8'"),
        (["report", "--db", db, "--exclude-above", "-1"], "invalid --exclude-above -1.0"),
        (["report", "--db", db, "--exclude-above", "nan"], "invalid --exclude-above nan"),
        (["report", "--db", db], "no finished attempts match"),
        (["import", "metr-runs", str(tmp_path / "none.jsonl"), "--db", db], "no such file"),
    ):
        code, _, err = run_main(argv, capsys)
        assert code == 2, argv
        assert expected in err and len(err.strip().splitlines()) == 1, err


def test_malformed_import_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.jsonl"
    good = {"run_id": "r1", "task_family": "ai_rd_fix_embedding", "alias": "GPT-4o", "time_limit": 1800, "score": 0.1}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "time_limit": "long"}) + "\n")
    db = str(tmp_path / "r.db")
    code, _, err = run_main(["import", "metr-runs", str(path), "--db", db], capsys)
    assert code == 2 and "line 2: field 'time_limit'" in err
    code, _, err = run_main(["report", "--db", db, "--json"], capsys)
    assert code == 2 and "no rebench database at" in err  # nothing of the failed import was kept, not even a file
