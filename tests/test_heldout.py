"""Held-out finals (`final_split`), probing, the reports and files that show them, and their anchors
as `envs calibrate` measures them, through the real CLI on the local backend and real SQLite: the
`counter` fixture's scorer reads `tuned I F` as I on the intermediate split and F on the held-out one,
standing for a solution fitted to the split its score calls used."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import run_cli

pytestmark = pytest.mark.slow

PROFILE = '''
[profiles.heldout]
resources = { gpus = 0, cpus = 1, memory_gb = 1 }
direction = "higher"
final_score = "best"
score_timeout_s = 5
anchors = { start = 1.0, reference = 11.0, source = "by construction" }
params = { secret_file = "answer.txt", split = "intermediate" }
final_split = { params = { split = "final" }, anchors = { start = 1.0, reference = 21.0 }, margin = 0.1 }
'''


def test_an_agent_tuned_to_the_intermediate_split_shows_a_gap(fixture_envs: Path, tmp_path: Path,
                                                              db_path: Path) -> None:
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + PROFILE)
    (fixture_envs / "counter" / "reference" / "value.txt").write_text("tuned 11 21")  # as good on both splits
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "tuned 9 5"}}, {"score": {}}, {"score": {}},
        {"submit": None}]}))
    for agent in (("replay", "--agent-arg", f"script={script}", "-k", "2"), ("reference",)):
        ran = run_cli("run", "--env", "counter", "--profile", "heldout", "--agent", *agent, "--budget", "2m",
                      "--backend", "local", "--db", str(db_path), "--no-calibrate", env=env)
        assert ran.returncode == 0, ran.stderr
    with sqlite3.connect(db_path) as connection:
        heldout = connection.execute("select attempt_id, raw from score_events where kind = 'heldout' "
                                     "order by attempt_id").fetchall()
        finals = connection.execute("select final_raw from attempts order by id").fetchall()
    # the final score is still the score log's (RE-Bench's rule); the held-out final is a row beside it
    assert heldout == [(1, 5.0), (2, 5.0), (3, 21.0)] and finals == [(9.0,), (9.0,), (11.0,)]
    from rebench.api import report

    made = report(db_path, budgets="2m", at="2m", n_bootstrap=200)
    assert made is not None
    agents = {a.agent: a for a in made.agents}
    tuned, reference = agents["replay"], agents["reference"]
    # best intermediate 0.8, held-out (5 - 1) / (21 - 1) = 0.2: a gap of 0.6 on both attempts
    assert (tuned.heldout_gap, tuned.heldout_gap_low, tuned.heldout_gap_high) == pytest.approx((0.6, 0.6, 0.6))
    assert (tuned.probing, tuned.heldout_n) == (2, 2) and tuned.calls_per_hour and tuned.calls_per_hour > 0
    assert (reference.heldout_gap, reference.probing) == (pytest.approx(0.0), 0)
    summary = {s.agent: s for s in made.summary}
    assert summary["replay"].heldout_mean == pytest.approx(0.2) and summary["replay"].mean == pytest.approx(0.8)
    rows = {r.agent: r for r in made.rows if r.environment == "counter"}
    assert rows["replay"].heldout_mean == pytest.approx(0.2) and rows["reference"].heldout_mean == pytest.approx(1.0)
    shown = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    assert "held-out final 0.200 vs best intermediate 0.800: gap 0.600 (flagged: probing)" in shown
    from rebench import analysis

    frame = analysis.attempts(db_path).set_index("attempt_id")
    assert list(frame["heldout_normalized"]) == pytest.approx([0.2, 0.2, 1.0])
    assert list(frame["heldout_gap"]) == pytest.approx([0.6, 0.6, 0.0])
    assert list(frame["probing"]) == [True, True, False] and (frame["calls_per_hour"] > 0).all()
    assert set(frame["heldout_anchors"]) == {"declared"}
    text = " ".join(run_cli("report", "--budgets", "2m", "--at", "2m", "--n-bootstrap", "50", "--db", str(db_path),
                            env=env).stdout.split())
    assert "0.800 (held-out 0.200)" in text and "0.600 [0.600, 0.600] (2/2;" in text and "final on held-out" in text
    _the_files_carry_the_heldout_columns(db_path, tmp_path, env, tuned.calls_per_hour)
    # `rebench rescore` takes the held-out final again too, from the best call's snapshot
    rescored = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert rescored.returncode == 0, rescored.stderr
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("select final_raw, heldout_raw, heldout_normalized from rescores").fetchall() == [
            (9.0, 5.0, pytest.approx(0.2))]


def _the_files_carry_the_heldout_columns(db_path: Path, tmp_path: Path, env: dict[str, str],
                                         calls_per_hour: float) -> None:
    """`report --json`, the HTML page and the score@k files (hence the analysis frame) give the same
    held-out numbers as rebench.api.report, under its field names: per row the mean held-out final,
    and on every row of an agent the agent's gap, interval, probing count and score calls per hour."""
    from rebench import analysis

    options = ("--budgets", "2m", "--at", "2m", "--n-bootstrap", "50", "--db", str(db_path))
    rows = json.loads(run_cli("report", "--json", *options, env=env).stdout)
    replay = [r for r in rows if r["agent"] == "replay"]
    assert {r["environment"] for r in replay} == {"counter", "all"}
    for row in replay:
        assert (row["heldout_mean"], row["heldout_gap"], row["heldout_gap_low"], row["heldout_gap_high"]) == \
            pytest.approx((0.2, 0.6, 0.6, 0.6))
        assert (row["probing"], row["heldout_n"]) == (2, 2) and row["calls_per_hour"] == pytest.approx(calls_per_hour)
        assert row["heldout_anchors"] == "declared"  # no calibration measured the held-out split here
    reference = [r for r in rows if r["agent"] == "reference"]
    assert reference and all(r["heldout_mean"] == pytest.approx(1.0) and r["heldout_gap"] == pytest.approx(0.0)
                             and r["probing"] == 0 for r in reference)
    written = run_cli("report", *options, "--out", str(tmp_path / "out"), env=env)
    assert written.returncode == 0, written.stderr
    page = (tmp_path / "out" / "report.html").read_text()
    assert "0.800 (held-out 0.200)" in page and "0.600 [0.600, 0.600] (2/2;" in page and "final on held-out" in page
    csv = run_cli("report", *options, "--format", "csv", "--out", str(tmp_path / "rows.csv"), env=env)
    assert csv.returncode == 0, csv.stderr
    frame = analysis.read_score_rows(tmp_path / "rows.csv")
    columns = analysis.score_row_columns()
    assert {c: columns[c] for c in HELDOUT_COLUMNS} == {
        "heldout_mean": "float64", "heldout_gap": "float64", "heldout_gap_low": "float64",
        "heldout_gap_high": "float64", "heldout_n": "int64", "probing": "int64", "calls_per_hour": "float64"}
    from_json: list[dict[str, Any]] = [{c: r[c] for c in ("environment", "agent", *HELDOUT_COLUMNS)} for r in rows]
    from_frame = frame[["environment", "agent", *HELDOUT_COLUMNS]].astype(object).to_dict("records")
    assert from_frame == [{c: pytest.approx(v, nan_ok=True) if isinstance(v, float) else v for c, v in r.items()}
                          for r in from_json]


HELDOUT_COLUMNS = ("heldout_mean", "heldout_gap", "heldout_gap_low", "heldout_gap_high", "heldout_n", "probing",
                   "calls_per_hour")


def test_calibrate_measures_the_heldout_anchors_and_reports_normalize_with_them(fixture_envs: Path, tmp_path: Path,
                                                                             db_path: Path) -> None:
    """`envs calibrate` scores both solutions on the held-out split too (the final_split params), stores
    those anchors with the calibration, and held-out finals are normalized with them from then on, as
    intermediate scores are with the calibrated ones (declared anchors otherwise: the test above)."""
    counter = fixture_envs / "counter"
    (counter / "environment.toml").write_text((counter / "environment.toml").read_text() + PROFILE)
    (counter / "workspace" / "value.txt").write_text("tuned 2 3")
    (counter / "reference" / "value.txt").write_text("tuned 12 43")
    env = {"REBENCH_ENVIRONMENTS": str(fixture_envs)}
    calibrated = run_cli("envs", "calibrate", "counter", "--profile", "heldout", "--backend", "local",
                         "--db", str(db_path), env=env)
    assert calibrated.returncode == 0, calibrated.stderr
    assert "held-out split: start 3.0000, reference 43.0000" in " ".join(calibrated.stdout.split())
    runs = [line.split(":")[0] for line in calibrated.stderr.splitlines() if " solution" in line and ", run " in line]
    assert runs == [f"{which} solution{split}, run {n}/3" for which in ("starting", "reference")
                    for split in ("", " on the held-out split") for n in (1, 2, 3)]
    with sqlite3.connect(db_path) as connection:
        stored = connection.execute("select start_raw, reference_raw, heldout_start_raw, heldout_reference_raw, "
                                    "samples from calibrations").fetchall()
    assert [row[:4] for row in stored] == [(2.0, 12.0, 3.0, 43.0)]
    samples = json.loads(stored[0][4])
    assert (samples["heldout_start"], samples["heldout_reference"]) == ([3, 3, 3], [43, 43, 43])
    in_use = json.loads(run_cli("envs", "show", "counter", "--json", "--db", str(db_path), env=env).stdout)[
        "anchors_in_use"]
    assert in_use["heldout"]["heldout"] == {"start": 3.0, "reference": 43.0, "kind": "calibrated",
                                            "hardware": in_use["heldout"]["hardware"], "heldout": None}
    assert in_use["tiny"]["heldout"] is None  # no final_split there

    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": "tuned 9 5"}}, {"score": {}}, {"submit": None}]}))
    ran = run_cli("run", "--env", "counter", "--profile", "heldout", "--agent", "replay", "--agent-arg",
                  f"script={script}", "--budget", "2m", "--backend", "local", "--db", str(db_path), env=env)
    assert ran.returncode == 0, ran.stderr
    rows = json.loads(run_cli("report", "--json", "--budgets", "2m", "--at", "2m", "--n-bootstrap", "50",
                              "--db", str(db_path), env=env).stdout)
    (row,) = [r for r in rows if r["environment"] == "counter"]
    # intermediate (9 - 2) / (12 - 2) = 0.7; held-out (5 - 3) / (43 - 3) = 0.05, not (5 - 1) / (21 - 1) as declared
    assert (row["mean"], row["heldout_mean"], row["heldout_gap"]) == pytest.approx((0.7, 0.05, 0.65))
    assert (row["anchors"], row["heldout_anchors"]) == ("calibrated", "calibrated")
    shown_attempt = " ".join(run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout.split())
    assert "held-out final 0.050 vs best intermediate 0.700: gap 0.650 (flagged: probing)" in shown_attempt
    rescored = run_cli("rescore", "--attempt", "1", "--backend", "local", "--db", str(db_path), env=env)
    assert rescored.returncode == 0, rescored.stderr
    with sqlite3.connect(db_path) as connection:
        assert connection.execute("select heldout_raw, heldout_normalized from rescores").fetchall() == [
            (5.0, pytest.approx(0.05))]
