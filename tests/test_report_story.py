"""`rebench report --out`: each attempt's story (score over time, pauses, aide tree, transcript
link) and score against money, on attempts that real runs wrote and on METR's public export.

Three own attempts on the `counter` fixture (local backend): two replay attempts (a valid, an
invalid and a valid score call; no model, so no cost) and one aide attempt whose model calls go
to the fake model server through the real openai SDK (priced, so it has a cost and tokens).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from rebench import api
from rebench.report.data import Filters, load_report_data
from rebench.report.story import load_stories
from rebench.store import Store
from tests.conftest import run_main
from tests.model_fixtures import call, replay_attempts_then_server

METR_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "metr-all-runs-2025-01-11.jsonl"
OPTIONS = ["--n-bootstrap", "20", "--budgets", "1m,2m", "--at", "2m"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def story_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("story")
    with replay_attempts_then_server(root) as (db, server):
        server.add(
            {"text": "Draft: seven.\n\n```\n# file: value.txt\n7\n```\n", "usage": {"input_tokens": 400,
                                                                                  "output_tokens": 60}},
            {"tool_calls": [call("submit_review", is_bug=False, summary="seven")],
             "usage": {"input_tokens": 500, "output_tokens": 40}},
        )
        agent = api.AgentConfig(name="aide", model="openai/scripted", base_url=server.openai_url,
                                args={"num_drafts": "1", "max_steps": "1"})
        api.run_campaign(api.CampaignSpec(environments=["counter"], budget_s="2m", backend="local", agent=agent),
                         db=db)
        yield db


@pytest.fixture
def own_envs(story_db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REBENCH_ENVIRONMENTS", str(story_db.parent / "envs"))
    return story_db


def sql(db: Path, query: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def test_each_attempt_gets_its_story_a_transcript_link_and_its_cost(
    own_envs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "report"
    code, out, err = run_main(["report", "--db", str(own_envs), *OPTIONS, "--out", str(out_dir)], capsys)
    assert code == 0, err
    assert f"3 attempt plot(s) in {out_dir / 'attempts'}" in out
    for attempt_id in (1, 2, 3):
        assert (out_dir / "attempts" / f"attempt_{attempt_id}.png").read_bytes().startswith(PNG)

    store = Store(own_envs, read_only=True)
    stories = {s.run.attempt_id: s for s in load_stories(store, load_report_data(store, Filters()).runs)}
    replay, aide = stories[1], stories[3]
    assert [v is None for _, v in replay.scores] == [False, True, False]  # the invalid call is kept, as a cross
    assert [p.reason for p in replay.pauses][:1] == ["setup"]  # the clock stopped for setup and the baseline
    assert replay.wall(replay.end_working_s) > replay.end_working_s  # pauses are added back on the time axis
    assert replay.tree is None and aide.tree is not None and [n.node for n in aide.tree.nodes] == [1]

    # the link points at the log file and sample that `rebench export inspect` / `rebench view` write
    pytest.importorskip("inspect_ai")
    from rebench.export.inspect_log import export_inspect

    exported = export_inspect(store, tmp_path / "logs")
    files = {i: Path(log.path).name for log in exported.logs for i in log.attempts}
    page = (out_dir / "report.html").read_text()
    for attempt_id, story in stories.items():
        assert story.log_file == files[attempt_id]
        assert f"#/logs/{quote(files[attempt_id])}/samples/sample/{attempt_id}/1/" in page  # as the viewer encodes
    assert "<code>rebench view --campaign 1</code>" in page and "<code>rebench view --campaign 2</code>" in page
    assert "Solution tree of attempt 3 (aide on counter)" in page  # drawn without --tree
    assert "[plot](attempts/attempt_2.png)" in (out_dir / "report.md").read_text()

    # score vs money: the aide attempt is priced, the replay attempts have no cost and are named as left out
    assert (out_dir / "score_vs_money.png").read_bytes().startswith(PNG)
    assert "score vs money leaves out 2 attempt(s) without a recorded cost (replay 2)" in page
    [(tokens, working_s, cost)] = sql(own_envs, "select input_tokens + output_tokens, working_s, cost_usd "
                                                "from attempts where agent = 'aide'")
    assert tokens == 1000 and float(cost) > 0  # type: ignore[arg-type]
    rate = f"{tokens / (float(working_s) / 3600):,.0f}"  # type: ignore[arg-type]
    markdown = (out_dir / "report.md").read_text()
    assert "| aide/openai/scripted | own | 1 | 0 | 0 |" in markdown
    aide_row = next(line for line in markdown.splitlines() if line.startswith("| aide/openai/scripted | own | 1"))
    replay_row = next(line for line in markdown.splitlines() if line.startswith("| replay | own | 2"))
    # the tokens/h column, then the held-out gap (none here: the fixture declares no final split)
    assert aide_row.endswith(f"| {rate} | - |") and replay_row.endswith("| - | - |")


@pytest.mark.skipif(not METR_FILE.is_file(), reason="needs ../shared/data/metr-all-runs-2025-01-11.jsonl")
def test_metr_data_money_plot_has_the_humans_and_names_the_agents_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [json.loads(line) for line in METR_FILE.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if str(r.get("task_family", "")).startswith("ai_rd_")]
    priced = sum(r["dollar_equivalent"] is not None for r in rows)
    db = tmp_path / "metr.db"
    api.import_metr_runs(METR_FILE, db=db)
    assert sql(db, "select count(*) from attempts where cost_usd > 0") == [(priced,)]
    out_dir = tmp_path / "report"
    code, _, err = run_main(["report", "--db", str(db), "--n-bootstrap", "20", "--out", str(out_dir)], capsys)
    assert code == 0, err
    assert (out_dir / "score_vs_money.png").read_bytes().startswith(PNG)
    page = (out_dir / "report.html").read_text()
    assert f"score vs money leaves out {len(rows) - priced} attempt(s) without a recorded cost (" in page
    assert "human" not in page[page.index("score vs money leaves out"):].split(")")[0]  # humans are all priced
    assert "<h2>Attempts</h2>" not in page and not (out_dir / "attempts").exists()  # no logs to tell
