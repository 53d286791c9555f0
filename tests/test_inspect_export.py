"""`rebench export inspect`: every written log is read back with Inspect's own reader and compared
with the store (read with plain SQL): samples, scores, event counts, times, tokens, status.

The campaigns are real (tests/inspect_campaigns.py): the kernel environment's tiny profile with
the reference and modular agents, and aide on the counter fixture. METR's imported rows are read
from shared/data, never copied into the repository.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.log import EvalLog, read_eval_log

from rebench.store import Store
from tests.conftest import REPO, RecordedRun, run_main
from tests.inspect_campaigns import SENTINEL_COMMAND, Campaigns, build_campaigns
from tests.test_import_metr import METR_FILE

HARNESS_TOOLS = ("bash", "python", "read_file", "write_file")
pytestmark = [pytest.mark.slow, pytest.mark.torch]  # the campaigns run the kernel environment (tiny) on PyTorch


@pytest.fixture(scope="module")
def campaigns(tmp_path_factory: pytest.TempPathFactory, kernel_first_run: RecordedRun) -> Iterator[Campaigns]:
    yield from build_campaigns(tmp_path_factory.mktemp("inspect"), kernel_first_run)


@pytest.fixture(scope="module")
def exported(campaigns: Campaigns, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("exported")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REBENCH_ENVIRONMENTS", str(REPO / "environments"))
        capsys_free = _main_json(["export", "inspect", "--db", str(campaigns.db), "--out", str(out), "--json"])
    return {"out": out, "summary": capsys_free}


def _main_json(argv: list[str]) -> dict[str, Any]:
    import contextlib
    import io

    from rebench.cli.app import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            main(argv)
        except SystemExit as exc:
            assert not exc.code, exc.code
    return json.loads(buffer.getvalue())


def _kinds(sample: Any) -> Counter[str]:
    return Counter(event.event for event in sample.events)


def _check_against_store(campaigns: Campaigns, log: EvalLog) -> None:
    assert log.samples is not None
    for sample in log.samples:
        (attempt,) = campaigns.rows("select * from attempts where id = ?", sample.id)
        rows = Counter(r["kind"] for r in campaigns.rows("select kind from events where attempt_id = ?", sample.id))
        scores = campaigns.rows("select * from score_events where attempt_id = ? order by id", sample.id)
        pauses = campaigns.rows("select * from pauses where attempt_id = ?", sample.id)
        kinds = _kinds(sample)
        # every score row is a score event, in order, with its raw value (+1: the final score event)
        shown = [e.score.value["raw"] for e in sample.events if e.event == "score" and e.intermediate]
        assert shown == [s["raw"] for s in scores]
        assert kinds["model"] == rows["model_call"]
        agent_tools = rows["tool_result"] > 0
        assert kinds["tool"] == (rows["tool_result"] if agent_tools else sum(rows[k] for k in HARNESS_TOOLS))
        assert kinds["sandbox"] == (sum(rows[k] for k in HARNESS_TOOLS) if agent_tools else 0)
        infos = Counter(e.source for e in sample.events if e.event == "info")
        assert infos["pause"] == len(pauses) and infos["submit"] == rows["submit"]
        assert infos["aide_node"] == rows["aide_node"]
        final = sample.scores["final"].value
        assert final["raw"] == attempt["final_raw"]
        assert final["normalized"] == pytest.approx(attempt["final_normalized"])
        rule = sample.scores["rebench_rule"].value
        rescored = attempt["final_rule"] == "rescore_best"
        assert rule["raw"] == (attempt["rule_raw"] if rescored else attempt["final_raw"])
        assert rule["normalized"] == pytest.approx(attempt["rule_normalized"] if rescored
                                                   else attempt["final_normalized"])
        assert sample.working_time == attempt["working_s"] and sample.total_time == attempt["wall_s"]
        assert sample.metadata["status"] == attempt["status"] and sample.metadata["model_wait_s"] == attempt[
            "model_wait_s"]
        if attempt["model"]:
            usage = sample.model_usage[attempt["model"]]
            assert (usage.input_tokens, usage.output_tokens) == (attempt["input_tokens"], attempt["output_tokens"])
            assert usage.total_cost == pytest.approx(attempt["cost_usd"]) and attempt["cost_usd"] > 0
        assert sample.input == json.loads(campaigns.rows(
            "select data from events where attempt_id = ? and kind = 'start'", sample.id)[0]["data"])["instructions"]


def test_every_log_reads_back_with_inspect_and_matches_the_store(campaigns: Campaigns,
                                                                 exported: dict[str, Any]) -> None:
    logs = exported["summary"]["logs"]
    groups = {(r["campaign_id"], r["environment"], r["agent"]) for r in campaigns.rows("select * from attempts")}
    assert len(logs) == len(groups) == 3
    for entry in logs:
        log = read_eval_log(entry["path"])
        assert log.samples is not None
        assert sorted(s.id for s in log.samples) == sorted(entry["attempts"])
        assert log.eval.task == entry["environment"] and log.eval.viewer is not None
        assert log.eval.viewer.trust_content is False, "agent-written content must show as plain text"
        assert {s.id: len(s.events) for s in log.samples} == {int(k): v for k, v in entry["events"].items()}
        _check_against_store(campaigns, log)


def test_the_modular_transcript_has_each_request_and_tool_call(campaigns: Campaigns, exported: dict[str, Any]) -> None:
    (entry,) = [e for e in exported["summary"]["logs"] if e["campaign"] == campaigns.modular_campaign]
    (sample,) = read_eval_log(entry["path"]).samples or []
    models = [e for e in sample.events if e.event == "model"]
    assert [len(m.input) for m in models] == [2, 5, 8], "system + task, then each turn's messages added"
    assert models[0].input[0].role == "system" and "bash" in {t.name for t in models[0].tools}
    assert models[0].output.message.tool_calls[0].arguments == {"command": SENTINEL_COMMAND}
    assert "rebench-sentinel-42" in models[1].input[3].text, "the command's output was sent back to the model"
    tools = [e for e in sample.events if e.event == "tool"]
    assert [t.function for t in tools] == ["bash", "score", "submit"]
    assert tools[0].arguments == {"command": SENTINEL_COMMAND} and "rebench-sentinel-42" in str(tools[0].result)
    shown = [e for e in sample.events if e.event == "score" and e.score.metadata["kind"] == "intermediate"]
    assert shown[0].score.metadata["shown_to_agent"]["valid"] is True
    assert [m.role for m in sample.messages] == ["system", "user", "assistant", "tool", "user", "assistant", "tool",
                                                 "user", "assistant", "tool"]


def test_the_aide_tree_and_the_reference_rescores_are_in_their_transcripts(campaigns: Campaigns,
                                                                            exported: dict[str, Any]) -> None:
    by_campaign = {e["campaign"]: read_eval_log(e["path"]).samples for e in exported["summary"]["logs"]}
    assert len(by_campaign[campaigns.aide_campaign] or []) == 2
    for aide in by_campaign[campaigns.aide_campaign] or []:
        nodes = [e.data for e in aide.events if e.event == "info" and e.source == "aide_node"]
        assert [(n["node"], n["step"], n["score"]) for n in nodes] == [(1, "draft", 7.0), (2, "improve", 9.0)]
        assert [t.function for t in aide.events if t.event == "tool"][:1] == ["bash"], "aide's commands are tools"
    (reference,) = by_campaign[campaigns.reference_campaign] or []
    rescores = [e.score for e in reference.events if e.event == "score" and e.score.metadata["kind"] == "rescore"]
    assert rescores and all(s.value["normalized"] is not None for s in rescores if s.metadata["valid"])
    assert reference.scores["final"].metadata["rule"] == "rescore_best"


def test_imported_metr_rows_are_samples_with_scores_only(tmp_path: Path) -> None:
    from rebench.export.inspect_log import export_inspect
    from rebench.report.importer import import_metr_runs

    store = Store(tmp_path / "metr.db")
    import_metr_runs(store, METR_FILE)
    with store.session() as session:
        from sqlalchemy import select

        from rebench.store import Attempt

        picked = list(session.scalars(select(Attempt.id).where(Attempt.environment == "triton_cumsum")
                                      .order_by(Attempt.id).limit(12)))
        expected = {a.id: a.final_normalized for a in session.scalars(select(Attempt).where(Attempt.id.in_(picked)))}
    summary = export_inspect(store, tmp_path / "logs", attempts=picked)
    store.close()
    seen = {}
    for entry in summary.logs:
        log = read_eval_log(entry.path)
        assert entry.campaign is None and log.eval.run_id == "rebench-imported"
        for sample in log.samples or []:
            assert sample.events == [] and "METR's run" in str(sample.input)
            seen[sample.id] = sample.scores["final"].value["normalized"]
    assert seen == pytest.approx(expected)


@pytest.mark.parametrize(("args", "message"), [
    (["--campaign", "99"], "no campaign with id 99"),
    (["--attempt", "12345"], "no attempt with id 12345"),
])
def test_unknown_ids_are_one_line_errors_and_write_nothing(
    campaigns: Campaigns, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str,
) -> None:
    out = tmp_path / "out"
    code, _, err = run_main(["export", "inspect", "--db", str(campaigns.db), "--out", str(out), *args], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _read_url(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The URL `rebench view` prints once the viewer serves (its stdout, line by line)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout or []], daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            assert process.poll() is None, (process.stderr.read() if process.stderr else "")
            continue
        if line.startswith("Inspect's viewer: "):
            return line.split()[2]
    raise AssertionError(f"no URL from rebench view within {timeout_s} s")


def test_rebench_view_renders_a_transcript_in_headless_chromium(campaigns: Campaigns, tmp_path: Path) -> None:
    """Inspect's own viewer, started by `rebench view`, in Debian's Chromium (driven by Playwright, which
    uses the system browser; nothing is downloaded). The screenshots stay in this test's tmp folder."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    port = _free_port()
    env = {**os.environ, "REBENCH_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "REBENCH_ENVIRONMENTS": str(REPO / "environments"), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "view", "--db", str(campaigns.db), "--port",
                                str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        url = _read_url(process, 180)
        assert url == f"http://127.0.0.1:{port}/"
        logs = {p.name: p for p in (tmp_path / "cache" / "inspect-view").glob("*/*.eval")}
        modular = next(n for n in logs if "_modular-" in n)
        aide = next(n for n in logs if "_aide-" in n)
        (attempt,) = campaigns.rows("select * from attempts where campaign_id = ?", campaigns.modular_campaign)
        (baseline,) = campaigns.rows("select raw from score_events where attempt_id = ? and kind = 'baseline'",
                                     attempt["id"])
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}#/logs/{aide}/samples")
            page.get_by_text("2 Samples").first.wait_for(timeout=60_000)
            page.screenshot(path=shots / "sample-list.png")
            listed = page.inner_text("body")
            page.goto(f"{url}#/logs/{modular}/samples/sample/{attempt['id']}/1/transcript")
            page.get_by_text(SENTINEL_COMMAND).first.wait_for(timeout=60_000)
            page.screenshot(path=shots / "transcript.png", full_page=True)
            transcript = page.inner_text("body")
            browser.close()
        print(f"screenshots: {shots}")
        aide_ids = [r["id"] for r in campaigns.rows("select id from attempts where agent = 'aide'")]
        assert all(f"{i}\nWrite a number into" in listed for i in aide_ids), "each aide attempt is a row"
        assert "rebench-sentinel-42" in transcript, "the command's output is rendered"
        assert str(attempt["final_raw"]) in transcript, "the final raw score is in the sample's header"
        shown = f"{baseline['raw']:.5f}".rstrip("0").rstrip(".")  # the viewer rounds to 5 decimals
        assert "baseline score\nEXPLANATION" in transcript and shown in transcript, "a score event is rendered"
        assert "INTERMEDIATE SCORE" in transcript.upper()
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=30) == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if process.poll() is None:  # the viewer too: it is in the process group of `rebench view`
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
