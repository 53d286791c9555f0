"""Window anchors (rebench.scoring.window): on a timing profile under rescore_best the starting and
reference solutions are scored in rounds beside the candidates' re-scores, and the final score is
normalized with their medians. Real CLI, local backend, real SQLite, on the `counter` fixture's
`rescore` profile, whose `cycle A B C ...` values stand for timings that drift (the n-th scoring
call of one text gives its n-th value)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
import yaml

from rebench.calibration import ResolvedAnchors, save_calibration
from rebench.environments.registry import EnvironmentRegistry
from rebench.scoring.window import final_anchors, uses_window_anchors
from rebench.store.db import Store
from rebench.store.models import ScoreEvent, ScoreKind

from .conftest import run_cli

START = "cycle 1 2 3 2"  # the baseline scores 1; the window's three rounds 2, 3, 2: median 2
REFERENCE = "cycle 7 8 9"  # the window: 7, 8, 9: median 8
CANDIDATE = "cycle 7 5 6 4"  # the agent's call 7; re-scored 5, 6, 4: median 5


def rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def test_the_final_score_is_normalized_with_the_windows_anchors(fixture_envs: Path, tmp_path: Path,
                                                                 db_path: Path) -> None:
    (fixture_envs / "counter" / "workspace" / "value.txt").write_text(START)
    (fixture_envs / "counter" / "reference" / "value.txt").write_text(REFERENCE)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"actions": [
        {"write_file": {"path": "value.txt", "content": CANDIDATE}}, {"score": {}}, {"submit": None}]}))
    env = {"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"]}
    result = run_cli("run", "--env", "counter", "--agent", "replay", "--agent-arg", f"script={script}", "--profile",
                     "rescore", "--budget", "2m", "--backend", "local", "--db", str(db_path), "--no-calibrate", env=env)
    assert result.returncode == 0, result.stderr
    kinds = [kind for (kind,) in rows(db_path, "select kind from score_events order by id")]
    assert kinds == ["baseline", "intermediate", *["anchor_start", "anchor_reference", "rescore"] * 3]
    assert rows(db_path, "select raw from score_events where kind like 'anchor%' order by id") == [
        (2,), (7,), (3,), (8,), (2,), (9,)]
    # final 5 on the window's scale (2 -> 8): 0.5, where the declared anchors (1 -> 11) would give 0.4;
    # RE-Bench's rule (the agent's best call, 7) is an intermediate score: the anchors in force
    (final_raw, normalized, anchors_kind, rule_raw, rule_normalized), = rows(
        db_path, "select final_raw, final_normalized, anchors_kind, rule_raw, rule_normalized from attempts")
    assert (final_raw, anchors_kind, rule_raw) == (5.0, "window", 7.0)
    assert normalized == pytest.approx(0.5) and rule_normalized == pytest.approx(0.6)

    shown = json.loads(run_cli("attempts", "show", "1", "--json", "--db", str(db_path), env=env).stdout)
    assert shown["window_anchors"] == {"start_raws": [2.0, 3.0, 2.0], "reference_raws": [7.0, 8.0, 9.0],
                                       "start": 2.0, "reference": 8.0, "used": True}
    text = run_cli("attempts", "show", "1", "--db", str(db_path), env=env).stdout
    assert "(window anchors)" in text
    assert "window anchors, measured beside the re-scores: start 2.0000 (median of 2.0000, 3.0000, 2.0000), " \
           "reference 8.0000 (median of 7.0000, 8.0000, 9.0000); the final score is normalized with them" in text

    # A calibration made later changes the anchors in force, hence RE-Bench's rule (0.3) and the score
    # log, but not the final score: reports take it on its own window's scale.
    store = Store(db_path)
    try:
        save_calibration(store, EnvironmentRegistry().get("counter"), "rescore", [1.0] * 3, [21.0] * 3)
    finally:
        store.close()
    report = json.loads(run_cli("report", "--json", "--db", str(db_path), env=env).stdout)
    (row,) = [r for r in report if r["environment"] == "counter" and r["k"] == 1]
    assert row["anchors"] == "window"
    assert row["mean"] == pytest.approx(0.5) and row["rule_mean"] == pytest.approx(0.3)


def test_calibrating_a_timing_profile_takes_the_solutions_in_turns(fixture_envs: Path, db_path: Path) -> None:
    (fixture_envs / "counter" / "workspace" / "value.txt").write_text(START)
    (fixture_envs / "counter" / "reference" / "value.txt").write_text(REFERENCE)
    result = run_cli("envs", "calibrate", "counter", "--profile", "rescore", "--backend", "local",
                     "--db", str(db_path), env={"REBENCH_ENVIRONMENTS": os.environ["REBENCH_ENVIRONMENTS"]})
    assert result.returncode == 0, result.stderr
    runs = [line.split(":")[0] for line in result.stderr.splitlines() if " solution, run " in line]
    assert runs == [f"{which} solution, run {n}/3" for n in (1, 2, 3) for which in ("starting", "reference")]
    (samples,), = rows(db_path, "select samples from calibrations")
    assert (json.loads(samples)["start"], json.loads(samples)["reference"]) == ([1, 2, 3], [7, 8, 9])


def _score(id_: int, kind: ScoreKind, raw: float | None) -> ScoreEvent:
    return ScoreEvent(id=id_, attempt_id=1, kind=kind, raw=raw, valid=raw is not None)


IN_FORCE = ResolvedAnchors(start=4.5, reference=1.9, kind="calibrated")


def test_the_anchors_in_force_stand_when_the_window_has_no_valid_median() -> None:
    start = [_score(1, ScoreKind.ANCHOR_START, 4.6), _score(3, ScoreKind.ANCHOR_START, 4.7),
             _score(5, ScoreKind.ANCHOR_START, 4.8)]
    good = [_score(2, ScoreKind.ANCHOR_REFERENCE, 2.1), _score(4, ScoreKind.ANCHOR_REFERENCE, None),
            _score(6, ScoreKind.ANCHOR_REFERENCE, 2.0)]
    # one invalid reference run ranks last (lower is better): the median is the worse valid one
    window = final_anchors("rescore_best", start + good, "lower", IN_FORCE)
    assert (window.kind, window.start, window.reference) == ("window", 4.7, 2.1)
    bad = [good[0], _score(4, ScoreKind.ANCHOR_REFERENCE, None), _score(6, ScoreKind.ANCHOR_REFERENCE, None)]
    assert final_anchors("rescore_best", start + bad, "lower", IN_FORCE) == IN_FORCE
    # interrupted while re-scoring: the final number is RE-Bench's rule, an intermediate score
    assert final_anchors("best", start + good, "lower", IN_FORCE) == IN_FORCE
    assert final_anchors("rescore_best", [], "lower", IN_FORCE) == IN_FORCE


def test_only_timing_profiles_under_rescore_best_measure_window_anchors(fixture_envs: Path) -> None:
    env = EnvironmentRegistry().get("counter")
    rescore, tiny = env.profile("rescore"), env.profile("tiny")
    assert uses_window_anchors(rescore, "rescore_best")
    assert not uses_window_anchors(rescore, "best")  # `--final-rule best`
    assert not uses_window_anchors(tiny, "rescore_best")  # not hardware-dependent: no drift to follow
    off = rescore.model_copy(update={"rescore": rescore.rescore.model_copy(update={"window_anchors": False})})
    assert not uses_window_anchors(off, "rescore_best")
