"""Reports from a real SQLite store: own attempts with score logs, humans, filters and written files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rebench.environments.registry import EnvironmentRegistry
from rebench.errors import RebenchError
from rebench.report.compute import ALL, Report, ScoreRow
from rebench.report.data import Filters, load_report_data
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.percentiles import human_percentile
from rebench.report.render import report_json, write_outputs
from rebench.report.service import make_report, settings_from_options
from rebench.store import Attempt, Campaign, ScoreEvent, Store

TOML = """
name = "{name}"
title = "{title}"
version = "1"
summary = "test environment"
metr_task_family = "ai_rd_{name}"

[profiles.tiny]
direction = "higher"
final_score = "{rule}"
score_visible = {visible}
anchors = {{ start = 0.0, reference = 10.0 }}
"""


@pytest.fixture
def info(tmp_path: Path) -> EnvironmentInfo:
    root = tmp_path / "environments"
    for name, title, rule, visible in (
        ("toy", "Toy Task", "best", "true"),
        ("hidden", "Hidden Task", "last", "false"),
    ):
        (root / name).mkdir(parents=True)
        (root / name / "environment.toml").write_text(TOML.format(name=name, title=title, rule=rule, visible=visible))
    return EnvironmentInfo(EnvironmentRegistry(root))


def _attempt(
    s: object, env: str, agent: str, budget_s: float, final: float | None, *, log=(), **extra: object
) -> Attempt:
    fields: dict[str, object] = {"status": "done", "profile": "tiny", "source": "own"}
    fields.update(extra)
    if fields["source"] == "own" and final is not None:
        fields.setdefault("final_raw", 10 * final)  # own attempts are normalized from raw: anchors 0 -> 10
    attempt = Attempt(environment=env, agent=agent, budget_s=budget_s, final_normalized=final, **fields)
    for working_s, raw, valid in log:
        attempt.score_events.append(ScoreEvent(working_s=working_s, raw=raw, valid=valid))
    s.add(attempt)  # type: ignore[attr-defined]
    return attempt


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "r.db")
    with store.session() as s:
        campaign = Campaign(spec={})
        other = Campaign(spec={})
        s.add_all([campaign, other])
        s.flush()
        c = campaign.id
        # agent "a": 2 h attempts with score logs (raw 0..10 maps to 0..1)
        _attempt(
            s,
            "toy",
            "a",
            7200,
            0.5,
            log=[(600, 2.0, True), (3000, 5.0, True), (6000, 4.0, True)],
            campaign_id=c,
        )
        _attempt(
            s,
            "toy",
            "a",
            7200,
            None,
            final_raw=6.0,
            log=[(1000, 9.0, False), (5000, 6.0, True)],
            campaign_id=c,
        )
        _attempt(s, "hidden", "a", 7200, 0.2, campaign_id=c)
        _attempt(s, "hidden", "a", 7200, 0.6, campaign_id=c)
        # errors count with what they scored; interrupted attempts and uncounted (retried) ones do not
        _attempt(s, "hidden", "a", 7200, None, status="error", error_source="agent", campaign_id=c)
        _attempt(s, "hidden", "a", 7200, 0.9, status="interrupted", error_source="user", campaign_id=c)
        _attempt(s, "hidden", "a", 7200, 0.9, counted=False, campaign_id=c)
        _attempt(s, "hidden", "a", 7200, 0.9, status="running", campaign_id=c)
        _attempt(s, "toy", "b", 1800, 0.3, campaign_id=other.id)
        _attempt(s, "toy", "x", 1800, 0.95, source="imported", anchors_kind="imported")
        # humans: 8 h attempts, two with a score log
        _attempt(s, "toy", "human", 28800, 0.8, log=[(3600, 3.0, True), (20000, 8.0, True)])
        _attempt(s, "toy", "human", 28800, 1.0, log=[(9000, 10.0, True)])
        _attempt(s, "toy", "human", 28800, 0.4, source="imported")
        _attempt(s, "hidden", "human", 28800, 0.5, source="imported")
        _attempt(s, "hidden", "human", 28800, 0.7, source="imported")
    return store


def _rows(report: Report, **match: object) -> list[ScoreRow]:
    return [r for r in report.rows if all(getattr(r, k) == v for k, v in match.items())]


def _one(report: Report, **match: object) -> ScoreRow:
    rows = _rows(report, **match)
    assert len(rows) == 1, rows
    return rows[0]


def test_report_numbers(store: Store, info: EnvironmentInfo) -> None:
    settings = settings_from_options(n_bootstrap=200, seed=3, budgets="30m,2h,8h,16h")
    report = make_report(store, Filters(campaigns=[1]), settings, info)
    assert report is not None
    # 2 h attempts cut to 30 min: only logged attempts, best valid score by 30 min (0.2 and nothing yet)
    cut = _one(report, agent="a", environment="toy", total_s=1800)
    assert cut.truncated and cut.n == 2 and cut.point == pytest.approx(0.1)
    assert not _rows(report, agent="a", environment="hidden", total_s=1800)  # no logs there
    # whole attempts: k = 1 is the mean; the raw score 6 counts as 0.6 (raw is the truth, not the stored 0.1)
    assert _one(report, agent="a", environment="toy", total_s=7200).point == pytest.approx(0.55)
    # k = 4 >= n: the max; the hidden-score environment stays at the mean (0.2, 0.6 and the error's 0)
    assert _one(report, agent="a", environment="toy", total_s=28800).point == pytest.approx(0.6)
    hidden = _one(report, agent="a", environment="hidden", total_s=28800)
    assert hidden.point == pytest.approx(0.8 / 3) and hidden.best_of_k == "mean" and hidden.n == 3
    overall = _one(report, agent="a", environment=ALL, total_s=28800)
    assert overall.point == pytest.approx((0.6 + 0.8 / 3) / 2) and overall.envs == 2
    assert overall.low <= overall.point <= overall.high
    # filters: campaign 1 holds neither b nor the imported x; humans stay as the yardstick
    assert {r.agent for r in report.rows} == {"a", "human"}
    # humans: 8 h attempts of every source; cut to 2 h only from logged ones
    human_cut = _one(report, agent="human", source="own", environment="toy", total_s=7200)
    assert human_cut.truncated and human_cut.point == pytest.approx((0.3 + 0.0) / 2)
    assert _one(report, agent="human", source="imported", environment=ALL, total_s=57600).k == 2
    # standing: a's 8 h average against the human curve over the same two environments
    standing = [s for s in report.standings if s.agent == "a" and s.total_s == 28800]
    humans = {"toy": [0.8, 1.0, 0.4], "hidden": [0.5, 0.7]}
    assert len(standing) == 1 and standing[0].human_percentile == human_percentile(standing[0].point, humans)
    assert standing[0].human_percentile == 0.0  # below the averaged 1st percentile (about 0.46)
    assert report.humans is not None and report.humans.runs == 5


def test_best_allocation_is_marked(store: Store, info: EnvironmentInfo) -> None:
    with store.session() as s:
        _attempt(s, "toy", "a", 1800, 0.9, campaign_id=1)
    report = make_report(store, Filters(agents=["a"]), settings_from_options(n_bootstrap=50), info)
    assert report is not None
    at_2h = _rows(report, agent="a", environment="toy", total_s=7200)
    assert {(r.budget_s, r.k, r.best_allocation) for r in at_2h} == {(1800, 4, True), (7200, 1, False)}


def test_source_filter_and_bad_options(store: Store, info: EnvironmentInfo) -> None:
    report = make_report(store, Filters(source="imported"), settings_from_options(n_bootstrap=20), info)
    assert report is not None
    assert {r.agent for r in report.rows} == {"x", "human"}
    with pytest.raises(RebenchError, match="unknown source 'mine'; allowed: own, imported"):
        Filters(source="mine")
    with pytest.raises(RebenchError, match="unknown estimator 'best'"):
        settings_from_options(estimator="best")
    with pytest.raises(RebenchError, match="--n-bootstrap 0"):
        settings_from_options(n_bootstrap=0)
    assert make_report(store, Filters(environments=["nothing"]), settings_from_options(), info) is None


def test_sampled_max_is_recorded(store: Store, info: EnvironmentInfo) -> None:
    report = make_report(store, Filters(), settings_from_options(estimator="sampled_max", n_bootstrap=20), info)
    assert report is not None and {r.estimator for r in report.rows} == {"sampled_max"}
    # with replacement, 4 draws of {0.5, 0.6}: 0.6 unless all four are 0.5
    row = _one(report, agent="a", environment="toy", total_s=28800)
    assert row.point == pytest.approx(0.6 - 0.1 / 16)
    assert {row["estimator"] for row in report_json(report)} == {"sampled_max"}


def test_written_files_hold_the_table_numbers(store: Store, info: EnvironmentInfo, tmp_path: Path) -> None:
    report = make_report(store, Filters(), settings_from_options(n_bootstrap=100, at="8h"), info)
    assert report is not None
    paths = write_outputs(report, tmp_path / "out", info)
    pngs = {"score_vs_budget.png", "score_by_attempt_length.png", "per_environment_8h.png", "score_over_time.png"}
    assert {p.name for p in paths} == {"report.md", "score_at_k.csv", "report.html"} | pngs
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4  # best lines, lines per attempt length, per env, over time
    assert "http://" not in page and "https://" not in page and "<script" not in page  # self-contained
    assert "100 resamples" in page and "seed 0" in page
    for row in report.rows:
        if row.environment == ALL:
            assert f"{row.point:.3f}" in page and f"{row.low:.3f}-{row.high:.3f}" in page
    for standing in report.standings:
        assert f"{standing.human_percentile:.0f}" in page
    assert "RE-Bench paper" in page and "0.64" in page and "82%" in page and "24%" in page
    with open(tmp_path / "out" / "score_at_k.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(report.rows) and float(rows[0]["point"]) == pytest.approx(report.rows[0].point)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| agent | source | total |" in markdown
    json.dumps(report_json(report))  # serializable


def test_loaded_curve_follows_the_final_rule(store: Store, info: EnvironmentInfo) -> None:
    data = load_report_data(store, Filters(agents=["a"]), info)
    logged = [r for r in data.runs if r.curve is not None]
    assert len(logged) == 2
    first = next(r for r in logged if r.score == 0.5)
    assert first.curve is not None
    assert [p.normalized for p in first.curve] == pytest.approx([0.2, 0.5, 0.5])  # best so far
    assert first.score_at(599) == 0.0 and first.score_at(3000) == pytest.approx(0.5)


def test_calibrated_anchors_and_model_labels(store: Store, info: EnvironmentInfo) -> None:
    """Own scores follow the anchors calibrated on this machine; own agents are told apart by model."""
    from rebench.calibration import hardware_fingerprint
    from rebench.store import Calibration

    with store.session() as s:
        s.add(
            Calibration(
                environment="toy",
                env_version="1",
                profile="tiny",
                hardware=hardware_fingerprint().key,
                start_raw=0.0,
                reference_raw=5.0,
            )
        )
        _attempt(s, "toy", "modular", 1800, 0.2, model="m1")  # raw 2 -> 0.4 on the calibrated scale
    report = make_report(store, Filters(agents=["modular"]), settings_from_options(n_bootstrap=20), info)
    assert report is not None
    row = _one(report, agent="modular/m1", environment="toy", total_s=1800)
    assert row.point == pytest.approx(0.4)
    summary = next(a for a in report.summary if a.agent == "modular/m1")
    assert summary.anchors == "calibrated" and summary.mean == pytest.approx(0.4)
    hidden_summary = next(a for a in report.summary if a.agent == "human" and a.environment == "hidden")
    assert hidden_summary.anchors == "imported"


def test_score_at_k_beyond_the_data_is_marked_or_left_out(fixture_envs: Path, tmp_path: Path) -> None:
    """Two 1 h attempts: at 8 h the estimate is 1h@8 resting on 2 runs. It used to show as plain `1h@8`."""
    from rebench import api
    from rebench.store.db import Store
    from rebench.store.models import Attempt

    db = tmp_path / "rebench.db"
    store = Store(db)
    with store.session() as session:
        for raw in (6.0, 11.0):
            session.add(Attempt(source="own", environment="counter", env_version="1.0.0", profile="tiny",
                                agent="replay", budget_s=3600.0, status="done", final_raw=raw))
    report = api.report(store, n_bootstrap=20, budgets="1h,8h", at="8h")
    assert report is not None
    (line,) = [line for line in report.headline if line.total_s == 8 * 3600]
    assert line.allocation == "1h@8†"
    assert {row.k: row.min_n for row in report.rows} == {1: 2, 8: 2}
    assert any("k above the runs behind them" in note for note in report.notes)
    strict = api.report(store, n_bootstrap=20, budgets="1h,8h", at="8h", strict=True)
    assert strict is not None
    assert {row.total_s for row in strict.rows} == {3600.0}
    assert any("--strict left out" in note for note in strict.notes)
    # the plots mark them too: a cross and the run count on the line, a hatched bar with its n
    from rebench.report import plots

    def texts(figure) -> list[str]:
        return [t.get_text() for axes in figure.axes for t in axes.texts] + [figure.axes[0].get_title()]

    curve = texts(plots.score_vs_budget_figure(report))
    assert "†n=2" in curve and any(plots.BEYOND_NOTE in t for t in curve)
    bars = plots.per_environment_figure(report, 8 * 3600)
    assert "†n=2" in texts(bars) and any(p.get_hatch() == "//" for p in bars.axes[0].patches)
    plain = texts(plots.per_environment_figure(report, 3600))
    assert "n=2" in plain and not any("†" in t for t in plain)
    assert not any("†" in t for t in texts(plots.score_vs_budget_figure(strict)))
    store.close()
