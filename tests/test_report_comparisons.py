"""Report comparisons on constructed stores: equal environment sets, the headline table, runs above 2,
attempts without a submission, files written when every run scores the same, and 80-column tables."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from rebench.environments.registry import EnvironmentRegistry
from rebench.report import plots
from rebench.report.data import Filters
from rebench.report.known_environments import EnvironmentInfo
from rebench.report.render import report_json, write_outputs
from rebench.report.rows import ALL, Report, ScoreRow
from rebench.report.service import make_report, settings_from_options
from rebench.report.terminal import print_terminal
from rebench.store import Store
from tests.test_report_build import TOML, _attempt

ENVS = [f"env{i}" for i in range(7)]
LONG_AGENT = "Claude 3.5 Sonnet (New)"
LONG_ENV = "scaffolding_for_rust_codecontests"


@pytest.fixture
def info(tmp_path: Path) -> EnvironmentInfo:
    root = tmp_path / "environments"
    for name in [*ENVS, LONG_ENV]:
        (root / name).mkdir(parents=True)
        text = TOML.format(name=name, title=f"Task {name}", rule="best", visible="true")
        (root / name / "environment.toml").write_text(text)
    return EnvironmentInfo(EnvironmentRegistry(root))


def _report(store: Store, info: EnvironmentInfo, **options: object) -> Report:
    settings = settings_from_options(n_bootstrap=50, **options)  # type: ignore[arg-type]
    report = make_report(store, Filters(), settings, info)
    assert report is not None
    return report


def _all_row(report: Report, agent: str, total_s: float, budget_s: float) -> ScoreRow:
    (row,) = [
        r for r in report.rows if (r.agent, r.environment, r.total_s, r.budget_s) == (agent, ALL, total_s, budget_s)
    ]
    return row


def test_best_allocation_compares_the_same_environments(tmp_path: Path, info: EnvironmentInfo) -> None:
    """30-minute attempts on 4 environments score higher on average than 2-hour ones on 7; at 2 h total
    the 30m@4 average covers other environments, so it must not win, and it says why."""
    store = Store(tmp_path / "r.db")
    with store.session() as s:
        for env in ENVS[:4]:
            for score in (0.8, 0.9):
                _attempt(s, env, "a", 1800, score)
        for env in ENVS:
            for score in (0.2, 0.3):
                _attempt(s, env, "a", 7200, score)
    report = _report(store, info, budgets="2h,8h")
    for total in (7200, 28800):
        short = _all_row(report, "a", total, 1800)
        long = _all_row(report, "a", total, 7200)
        assert short.envs == 4 and long.envs == 7 and short.point > long.point
        assert not short.comparable and not short.best_allocation
        assert long.comparable and long.best_allocation
    # per environment the two lengths cover the same environment, so 30m@4 still wins there
    env0 = [r for r in report.rows if (r.agent, r.environment, r.total_s) == ("a", ENVS[0], 7200)]
    assert {r.budget_s for r in env0 if r.best_allocation} == {1800}
    out = io.StringIO()
    print_terminal(report, Console(file=out, width=160), info=info)
    assert "not comparable: 4 of 7 envs" in out.getvalue()
    assert {(r["budget_s"], r["comparable"]) for r in report_json(report) if r["environment"] == ALL} >= {
        (1800, False),
        (7200, True),
    }
    # the plot's one line per agent follows the comparable allocation too
    lines = plots.best_curves(report)
    assert set(lines) == {("a", "own")}  # one line for the agent, whatever its attempt lengths
    totals = [r.total_s for r in lines[("a", "own")]]
    assert len(totals) == len(set(totals)) and {1800.0, 7200.0, 28800.0} <= set(totals)
    assert {r.budget_s for r in lines[("a", "own")] if r.total_s == 7200} == {7200}


def test_no_allocation_covering_every_environment_is_said(tmp_path: Path, info: EnvironmentInfo) -> None:
    store = Store(tmp_path / "r.db")
    with store.session() as s:
        for env in ENVS[:4]:
            _attempt(s, env, "a", 1800, 0.5)
        for env in ENVS[3:]:
            _attempt(s, env, "a", 7200, 0.4)
    report = _report(store, info, budgets="2h")
    at_2h = [r for r in report.rows if (r.agent, r.environment, r.total_s) == ("a", ALL, 7200)]
    assert len(at_2h) == 2
    assert [r.best_allocation for r in at_2h] == [False, False]
    assert [r.comparable for r in at_2h] == [False, False]
    assert any("a (own) at 2h: no allocation covers all 7 environments" in note for note in report.notes)


@pytest.fixture
def mixed_store(tmp_path: Path) -> Store:
    """Agent `a` (30-minute attempts, one above 2, two without a submission) and 8 h humans
    without score logs (as METR's export), two of them above 2."""
    store = Store(tmp_path / "m.db")
    with store.session() as s:
        for env in ENVS[:2]:
            _attempt(s, env, "a", 1800, 0.4, submitted=True)
            _attempt(s, env, "a", 1800, 0.2, submitted=False)
            _attempt(s, env, "human", 28800, 0.6, submitted=True)
            _attempt(s, env, "human", 28800, 0.8, submitted=True)
        _attempt(s, ENVS[0], "a", 1800, 3.0, submitted=True)
        _attempt(s, ENVS[0], "human", 28800, 2.5, submitted=True)
        _attempt(s, ENVS[1], "human", 28800, 4.0, submitted=True)
    return store


def test_runs_above_two_are_counted_once_and_shown_without(mixed_store: Store, info: EnvironmentInfo) -> None:
    report = _report(mixed_store, info)
    # humans sit both among the runs and among the yardstick: each counts once
    (note,) = [n for n in report.notes if "above 2" in n]
    assert note.startswith("3 runs score above 2 (a 1, human 2)")
    agents = {a.agent: a for a in report.agents}
    assert agents["a"].above_2 == 1 and agents["human"].above_2 == 2
    assert agents["a"].attempts == 5 and agents["human"].attempts == 6
    # the headline without the runs above 2 is what --exclude-above 2 reports
    excluded = _report(mixed_store, info, exclude_above=2.0)
    for name in ("a", "human"):
        again = {a.agent: a for a in excluded.agents}[name]
        assert agents[name].score_without_above_2 == pytest.approx(again.score)
        assert agents[name].allocation_without_above_2 == again.allocation
        assert again.score is not None and agents[name].score is not None and again.score < agents[name].score
    assert max(r.best for r in excluded.rows) <= 2.0
    assert any("--exclude-above 2 left out 3 runs (a 1, human 2)" in n for n in excluded.notes)
    assert not any("score above 2" in n for n in excluded.notes)
    out = io.StringIO()
    print_terminal(report, Console(file=out, width=160), info=info)
    assert "without >2" in out.getvalue()


def test_bad_exclude_above_is_a_one_line_error() -> None:
    from rebench.errors import RebenchError

    with pytest.raises(RebenchError, match=r"invalid --exclude-above -1\.0"):
        settings_from_options(exclude_above=-1.0)


def test_attempts_without_a_submission_are_shown(mixed_store: Store, info: EnvironmentInfo, tmp_path: Path) -> None:
    report = _report(mixed_store, info)
    assert {a.agent: a.not_submitted for a in report.agents} == {"a": 2, "human": 0}
    assert {(s.environment, s.agent): s.not_submitted for s in report.summary if s.agent == "a"} == {
        (ENVS[0], "a"): 1,
        (ENVS[1], "a"): 1,
    }
    row = _all_row(report, "a", 1800, 1800)
    assert row.not_submitted == 2 and json.loads(json.dumps(report_json(report)))  # in the JSON rows
    out = io.StringIO()
    print_terminal(report, Console(file=out, width=160), info=info)
    text = out.getvalue()
    assert "unsubmitted" in text
    header = next(line for line in text.splitlines() if line.startswith("┃") and "no submit" in line)
    cells = [c.strip() for c in header.split("┃")]
    agent_row = next(line for line in text.splitlines() if line.startswith("│ a "))
    values = dict(zip(cells, [c.strip() for c in agent_row.split("│")], strict=True))
    assert (values["runs"], values["no submit"], values[">2"]) == ("5", "2", "1")
    write_outputs(report, tmp_path / "out", info)
    assert "unsubmitted" in (tmp_path / "out" / "report.md").read_text()
    assert "unsubmitted" in (tmp_path / "out" / "report.html").read_text()


def test_headline_table(mixed_store: Store, info: EnvironmentInfo, tmp_path: Path) -> None:
    report = _report(mixed_store, info, budgets="30m,2h,8h,16h,32h")
    lines = {line.total_s: line for line in report.headline}
    assert sorted(lines) == [7200, 28800, 57600, 115200]
    two = lines[7200]
    assert two.agent == "a" and two.allocation == "30m@4†"  # k=4 on 2 runs: marked and two.human_score is None
    assert "no: human attempts are 8 h and none has a score log" in two.human_data
    eight = lines[28800]
    human_8h = _all_row(report, "human", 28800, 28800)
    agent_8h = _all_row(report, "a", 28800, 1800)
    assert eight.human_score == pytest.approx(human_8h.point) and eight.agent_score == pytest.approx(agent_8h.point)
    assert eight.ratio == pytest.approx(agent_8h.point / human_8h.point) and eight.same_environments
    assert eight.human_data.startswith("yes (8h@1")
    write_outputs(report, tmp_path / "out", info)
    page = (tmp_path / "out" / "report.html").read_text()
    title = "best agent vs human experts by total time budget"
    assert page.index(title) < page.index("<img")  # the headline comes first
    table = page[page.index(title) : page.index("</table>", page.index(title))]
    assert "none has a score log" in table and f"{eight.ratio:.2f}" in table
    narrowed = _report(mixed_store, info, budgets="8h")
    assert "not in --budgets" in {line.total_s: line for line in narrowed.headline}[7200].human_data


def test_files_when_every_run_of_an_environment_scores_the_same(tmp_path: Path, info: EnvironmentInfo) -> None:
    """Seven runs of 0.7: the bootstrap bounds land a rounding step off the point (issue 9, item 5)."""
    store = Store(tmp_path / "same.db")
    with store.session() as s:
        for _ in range(7):
            _attempt(s, ENVS[0], "a", 1800, 0.7)
            _attempt(s, ENVS[0], "human", 28800, 0.7)
    for at in ("30m", "2h", "8h"):
        report = _report(store, info, at=at)
        paths = write_outputs(report, tmp_path / at, info)
        names = {p.name for p in paths}
        assert {"report.md", "score_at_k.csv", "report.html", f"per_environment_{at}.png"} <= names
        assert {"score_vs_budget.png", "score_by_attempt_length.png"} <= names
        for path in paths:
            if path.suffix == ".png":
                assert path.read_bytes().startswith(b"\x89PNG")
    rows = plots.best_allocation_rows(report, 28800)[("a", "own")]
    assert min(min(side) for side in plots.error_bars(rows)) >= 0


def test_axis_is_not_stretched_by_one_outlier() -> None:
    bulk = [0.1 * i for i in range(1, 10)]
    top = plots.robust_top([*bulk, 7.9])
    assert 0.9 < top < 7.9  # the bulk fits, the outlier is marked on the edge instead
    assert plots.robust_top(bulk) == pytest.approx(0.9 * 1.1 + 0.02)  # nothing cut without an outlier


def test_key_columns_are_never_cut_at_80_columns(tmp_path: Path, info: EnvironmentInfo) -> None:
    store = Store(tmp_path / "wide.db")
    with store.session() as s:
        for score in (0.1, 0.3):
            _attempt(s, LONG_ENV, LONG_AGENT, 1800, score)
            _attempt(s, ENVS[0], LONG_AGENT, 1800, score)
    report = _report(store, info)
    for terminal in (True, False):  # an 80-column terminal, and a pipe
        out = io.StringIO()
        print_terminal(
            report, Console(file=out, width=80, force_terminal=terminal, color_system=None), by_env=True, info=info
        )
        text = out.getvalue()
        assert "…" not in "".join(line for line in text.splitlines() if LONG_AGENT[:6] in line)
        assert text.count(LONG_AGENT) >= 3  # headline, per agent, score table: whole, on one line
        assert LONG_ENV in text
        if terminal:
            assert max(len(line) for line in text.splitlines()) <= 80
