"""Agent text is text in every terminal (issue 50, item 1). The attack: an agent whose tool calls,
model text, notes, submission and names carry Rich markup (`[/unbalanced]` made `attempts show`
exit 1 with a MarkupError; `[link=...]` and `[blink]` became a hyperlink and blinking text) and raw
control sequences (escape codes, OSC 8 links, C1, bidi overrides). Each command an operator reads
an attempt with runs as the real CLI under a forced colour terminal: it exits 0, shows the text as
written, and emits no control sequence of the agent's; `--json` keeps the exact bytes."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import FIXTURE_ENVS, REPO
from .hostile_text import AGENT, HOSTILE, VISIBLE, hostile_database, plain, problems

pytestmark = pytest.mark.adversarial
COLOUR = {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "200"}


@pytest.fixture
def hostile_db(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    db = tmp_path / "hostile.db"
    return db, hostile_database(db, tmp_path / "gate")


def _env(colour: bool) -> dict[str, str]:
    """A colour terminal as rich detects one (FORCE_COLOR), or a pipe."""
    env = {**os.environ, "REBENCH_ENVIRONMENTS": str(FIXTURE_ENVS), **(COLOUR if colour else {"COLUMNS": "200"})}
    if not colour:
        env.pop("FORCE_COLOR", None)
    return env


def _cli(*args: str, colour: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rebench.cli.app", *args], capture_output=True, text=True,
                          env=_env(colour), cwd=REPO, timeout=timeout)


def _clean(done: subprocess.CompletedProcess[str], *, live: bool = False) -> str:
    assert done.returncode == 0, done.stderr[-2000:]
    assert problems(done.stdout, live=live) == [] and problems(done.stderr, live=live) == [], (
        problems(done.stdout, live=live), problems(done.stderr, live=live))
    return plain(done.stdout)


def test_attempts_show_prints_every_hostile_field_as_text(hostile_db: tuple[Path, dict[str, int]]) -> None:
    db, ids = hostile_db
    shown = _clean(_cli("attempts", "show", str(ids["done"]), "--db", str(db)))
    for text in VISIBLE:
        assert text in shown, text
    assert "evil[/a]$\\frac{$\\x1b[5m\\u202e" in shown  # the agent's name, its control characters made visible
    assert "\\x1b]8;;https://evil.example/y" in shown


def test_attempts_show_json_keeps_the_exact_bytes(hostile_db: tuple[Path, dict[str, int]]) -> None:
    db, ids = hostile_db
    done = _cli("attempts", "show", str(ids["done"]), "--db", str(db), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    detail = json.loads(done.stdout)
    assert detail["agent"] == AGENT
    bash = next(e for e in detail["events"] if e["kind"] == "bash")
    assert bash["data"]["stdout"] == HOSTILE


EXPERT_SHOWN = "Mallory [/x][blink]"
ODD_SHOWN = "env[/e]$\\frac{$[link=https://evil.example/e]E"


@pytest.mark.parametrize(("command", "shows"), [
    (("attempts", "list"), "evil[/a]"), (("campaigns", "list"), "evil[/a]"),
    (("campaigns", "show", "{campaign}"), "evil[/a]"), (("human", "list"), EXPERT_SHOWN),
    (("human", "status", "{human}"), EXPERT_SHOWN), (("report",), "evil[/a]"),
    (("attempts", "show", "{human}"), EXPERT_SHOWN), (("attempts", "show", "{odd}"), ODD_SHOWN),
])
def test_every_listing_prints_hostile_names_as_text(hostile_db: tuple[Path, dict[str, int]],
                                                    command: tuple[str, ...], shows: str) -> None:
    db, ids = hostile_db
    shown = _clean(_cli(*(part.format(**ids) for part in command), "--db", str(db)))
    assert shows in shown, shown[-2000:]


def test_db_check_and_a_refused_rescore_stay_text(hostile_db: tuple[Path, dict[str, int]]) -> None:
    db, ids = hostile_db
    _clean(_cli("db", "check", str(db)))
    refused = _cli("rescore", "--attempt", str(ids["done"]), "--backend", "local", "--db", str(db))
    assert refused.returncode == 2 and problems(refused.stderr) == [], refused.stderr


def test_report_files_show_the_text_and_link_nothing(hostile_db: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    db, _ = hostile_db
    out = tmp_path / "report"
    _clean(_cli("report", "--db", str(db), "--out", str(out)))
    markdown = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    for text in (markdown, page):
        assert problems(text) == [], problems(text)
    assert "evil\\[/a\\]\\$" in markdown  # shown, every bracket and dollar escaped
    for syntax in (r"(?<!\\)\[link=", r"(?<!\\)\[/unbalanced", r"(?<!\\)\$\\"):  # a link, a bracket, math
        assert re.search(syntax, markdown) is None, syntax
    assert "evil[/a]" in page and "href=\"https://evil" not in page


def _finish(db: Path) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("update attempts set status = 'done' where status = 'running'")
        connection.execute("update campaigns set status = 'done'")


@pytest.mark.parametrize("colour", [True, False], ids=["live view", "progress lines in a pipe"])
def test_campaigns_watch_shows_the_running_hostile_attempt_as_text(hostile_db: tuple[Path, dict[str, int]],
                                                                   colour: bool) -> None:
    db, ids = hostile_db
    proc = subprocess.Popen([sys.executable, "-m", "rebench.cli.app", "campaigns", "show", str(ids["campaign"]),
                             "--watch", "--progress-every", "1s", "--db", str(db)], env=_env(colour), cwd=REPO,
                            text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(5)
    _finish(db)
    out, err = proc.communicate(timeout=60)
    shown = _clean(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), live=colour)
    assert "evil[/a]" in shown, shown[-2000:]
