"""`rebench envs noise`: the spread of repeated scores, stored per machine and shown by `envs show`.

The figures are checked on hand-made samples; the command runs for real (local sandbox, real
scoring calls) on the counter fixture, whose scorer is made noisy or broken where a test needs it.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path

import pytest

from rebench import api
from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.noise import PAPER_START_SD, NoiseSamples, paper_start_sd, summarize
from rebench.provenance import rebench_version
from rebench.report.known_environments import RE_BENCH_ENVIRONMENTS

from .conftest import REPO, run_main

NOISY_SCORER = '''
import os
import random


def score(ctx):
    with open(os.path.join(ctx["solution"], "value.txt")) as handle:
        text = handle.read().strip()
    if text == "invalid":
        return {"raw": None, "message": {"error": "invalid on purpose"}}
    return {"raw": float(text) + random.uniform(-0.5, 0.5), "message": {}}
'''

RESCORED_PROFILE = '''
[profiles.rescored]
resources = { gpus = 0, cpus = 1, memory_gb = 1 }
direction = "higher"
final_score = "rescore_best"
rescore = { repeats = 3 }
score_timeout_s = 5
anchors = { start = 1.0, reference = 11.0, source = "by construction" }
params = { secret_file = "answer.txt" }
'''


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


@pytest.fixture
def noisy_envs(fixture_envs: Path) -> Path:
    """The counter fixture with a scorer that adds uniform noise, and a profile that re-scores."""
    (fixture_envs / "counter" / "scoring" / "score.py").write_text(NOISY_SCORER)
    toml = fixture_envs / "counter" / "environment.toml"
    toml.write_text(toml.read_text() + RESCORED_PROFILE)
    return fixture_envs


def test_figures_from_samples() -> None:
    """Every start call counts for the single-call spread; each group's median is one final-rule
    score; both are normalized by the gap between the two solutions' means."""
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    samples = NoiseSamples(start=[[1.0, 3.0, 2.0], [5.0, 4.0, 9.0]], reference=[11.0, 13.0], seconds=[1.0, 3.0])
    summary = summarize(env, "tiny", samples)
    calls = [1.0, 3.0, 2.0, 5.0, 4.0, 9.0]
    scale = 12.0 - statistics.fmean(calls)
    assert (summary.n, summary.repeats, summary.start_calls) == (2, 3, 6)
    assert summary.scale == pytest.approx(scale)
    assert summary.start_sd == pytest.approx(statistics.stdev(calls))
    assert summary.start_sd_normalized == pytest.approx(statistics.stdev(calls) / scale)
    assert summary.final_start_mean == pytest.approx(3.5)  # medians 2 and 5
    assert summary.final_start_sd_normalized == pytest.approx(statistics.stdev([2.0, 5.0]) / scale)
    assert summary.reference_sd_normalized == pytest.approx(statistics.stdev([11.0, 13.0]) / scale)
    assert summary.paper_start_sd == 0.005 and summary.seconds_per_call == 2.0


@pytest.mark.parametrize(("start", "reference", "message"), [
    ([[4.0, None], [4.1, 4.2]], [3.0, 3.1], "starting solution did not score validly"),
    ([[4.0], [4.1]], [3.0, None], "reference solution did not score validly"),
    ([[4.0], [4.2]], [4.2, 4.0], "score the same on average"),
    ([[4.0]], [3.0], "at least 2 scores"),
])
def test_samples_without_a_spread_are_refused(start: list[list[float | None]], reference: list[float | None],
                                              message: str) -> None:
    env = EnvironmentRegistry(REPO / "environments").get("triton_cumsum")
    with pytest.raises(RebenchError, match=message):
        summarize(env, "tiny", NoiseSamples(start=start, reference=reference))


def test_paper_figures_cover_re_bench_and_the_environments_here() -> None:
    assert set(PAPER_START_SD) == {known.metr_task_family for known in RE_BENCH_ENVIRONMENTS}
    for env in EnvironmentRegistry(REPO / "environments").all():
        if env.metadata.metr_task_family is None:  # taken from a paper, not from RE-Bench (issue 30)
            assert paper_start_sd(env) is None, env.name
            continue
        assert paper_start_sd(env) == PAPER_START_SD[str(env.metadata.metr_task_family)], env.name


def test_command_measures_stores_and_envs_show_prints_it(noisy_envs: Path, db_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["envs", "show", "counter", "--db", str(db_path)], capsys)
    assert code == 0 and "scoring noise here: not measured" in " ".join(out.split()), err
    code, out, err = run_main(["envs", "noise", "counter", "-n", "4", "--json", "--db", str(db_path)], capsys)
    assert code == 0, err
    printed = json.loads(out)
    (stored, samples), = rows(db_path, "select summary, samples from noise_measurements")
    stored, samples = json.loads(stored), json.loads(samples)
    assert printed.pop("generated_by") == {"rebench_version": rebench_version()}  # which rebench printed it
    assert {k: v for k, v in printed.items() if k != "created_at"} == stored
    starts = [v for group in samples["start"] for v in group]
    assert len(samples["start"]) == 4 and all(len(group) == 1 for group in samples["start"])  # tiny: final = best
    assert len(samples["reference"]) == 4 and len(samples["seconds"]) == 8
    assert all(0.5 <= v <= 1.5 for v in starts) and all(10.5 <= v <= 11.5 for v in samples["reference"])
    assert stored["start_sd"] == pytest.approx(statistics.stdev(starts)) and stored["start_sd"] > 0
    assert stored["final_start_sd_normalized"] == pytest.approx(stored["start_sd_normalized"])
    code, out, err = run_main(["envs", "show", "counter", "--db", str(db_path)], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert f"sd of the start {stored['start_sd_normalized']:.3f} normalized per call" in out
    assert "n=4" in out and "best: one call" in out
    code, out, err = run_main(["envs", "show", "counter", "--json", "--db", str(db_path)], capsys)
    shown = json.loads(out)["noise_here"]
    assert shown["lower"] is None and shown["tiny"]["start_sd"] == stored["start_sd"]


def test_a_rescore_best_profile_takes_each_final_score_as_a_median(noisy_envs: Path, db_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["envs", "noise", "counter", "-p", "rescored", "-n", "3", "--db", str(db_path)],
                              capsys)
    assert code == 0, err
    assert "final (median of 3)" in out and "3x3" in out
    (samples, final_sd), = rows(db_path, "select samples, final_start_sd_normalized from noise_measurements")
    groups = json.loads(samples)["start"]
    assert [len(group) for group in groups] == [3, 3, 3]
    scale = abs(statistics.fmean(json.loads(samples)["reference"]) - statistics.fmean([v for g in groups for v in g]))
    assert final_sd == pytest.approx(statistics.stdev([statistics.median(g) for g in groups]) / scale)
    result = api.measure_noise("counter", "tiny", n=2, rescore_repeats=2, db=db_path)
    assert (result.repeats, result.final_rule, result.n) == (2, "best", 2)
    assert api.noise_measured("counter", db_path)["tiny"] == result
    code, out, err = run_main(["envs", "show", "counter", "--db", str(db_path)], capsys)
    out = " ".join(out.split())  # rich wraps at the console's width
    assert "(median of 3)" in out and "(median of 2, not best)" in out, out


BAD_NOISE = [
    (["-n", "1"], "invalid -n 1"),
    (["-n", "101"], "invalid -n 101"),
    (["--rescore-repeats", "0"], "invalid --rescore-repeats 0"),
    (["-p", "huge"], "no profile 'huge'"),
    (["--backend", "cloud"], "unknown backend 'cloud'"),
]


@pytest.mark.parametrize(("options", "message"), BAD_NOISE, ids=[m for _, m in BAD_NOISE])
def test_bad_input_is_one_line_and_stores_nothing(options: list[str], message: str, noisy_envs: Path,
                                                  db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["envs", "noise", "counter", *options, "--db", str(db_path)], capsys)
    assert code == 2 and err.strip().splitlines() == [err.strip()] and message in err, err
    assert not db_path.exists()


def test_unknown_environment_is_one_line(noisy_envs: Path, db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["envs", "noise", "nope", "--db", str(db_path)], capsys)
    assert code == 2 and err.strip() == "error: unknown environment 'nope'; allowed: counter, gateway_echo"


def test_an_invalid_score_stores_nothing(noisy_envs: Path, db_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (noisy_envs / "counter" / "reference" / "value.txt").write_text("invalid\n")
    code, _, err = run_main(["envs", "noise", "counter", "-n", "2", "--db", str(db_path)], capsys)
    assert code == 2 and "reference solution did not score validly" in err.strip().splitlines()[-1]
    assert rows(db_path, "select count(*) from noise_measurements") == [(0,)]
