"""Audited corrections of a human attempt's clock (`rebench human adjust`), its recordings (`rebench
human replay`, `attempts show`) and its working time with and without corrections, on real SQLite files
through the real command line."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.models import Attempt, AttemptStatus, Event, EventKind, Pause, PauseCorrection
from rebench.store.worktime import corrected_at, merge
from tests.human_rows import CLOCK_ORIGIN, WORKING_S, human_attempt, write_cast

from .conftest import run_cli, run_main


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, int, Path]:
    """A database with one finished human attempt (2 h on the clock, 6000 s working) and its gate folder."""
    monkeypatch.setenv("USER", "operator-ola")
    monkeypatch.setenv("LOGNAME", "operator-ola")
    db, gate = tmp_path / "r.db", tmp_path / "rbh-gate"
    attempt_id = human_attempt(Store(db), gate)
    return db, attempt_id, gate


def _rows(db: Path, query: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(query).fetchall()


def _cli(capsys: pytest.CaptureFixture[str], db: Path, *args: object) -> tuple[int, str, str]:
    return run_main([*(str(a) for a in args), "--db", str(db)], capsys)


def test_adjust_stores_who_and_why_and_leaves_the_recorded_clock_alone(
    setup: tuple[Path, int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, attempt_id, _ = setup
    code, out, err = _cli(capsys, db, "human", "adjust", attempt_id, "--pause", "30m", "2400s",
                          "--reason", "unreported coffee break")
    assert code == 0, err
    assert "6000 s" in out and "5400 s" in out and "operator-ola" in out  # uncorrected, corrected, the author
    assert _rows(db, "SELECT start_s, end_s, reason, author FROM pause_corrections") == [
        (1800.0, 2400.0, "unreported coffee break", "operator-ola")]
    # nothing rewrites history: the recorded pauses and working time are as they were
    assert _rows(db, "SELECT reason, start_s, end_s FROM pauses ORDER BY id") == [
        ("waiting", 0.0, 600.0), ("break", 3600.0, 4200.0)]
    assert _rows(db, f"SELECT working_s FROM attempts WHERE id = {attempt_id}") == [(WORKING_S,)]
    # a second one overlapping the recorded break counts only its part outside it (300 s), and a time
    # of day is placed on the clock through the attempt's clock origin
    start = datetime.fromtimestamp(CLOCK_ORIGIN + 3300, UTC).isoformat()
    code, out, err = _cli(capsys, db, "human", "adjust", attempt_id, "--pause", start, "3900",
                          "--reason", "lost VS Code connection", "--author", "Grace", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["author"] == "Grace" and result["start_s"] == pytest.approx(3300)
    assert result["uncorrected_working_s"] == WORKING_S
    assert result["corrected_working_s"] == pytest.approx(WORKING_S - 600 - 300)


def test_a_running_attempt_is_corrected_up_to_now(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """While the attempt runs its stored wall and working time lag behind; its clock span runs to now."""
    db = tmp_path / "r.db"
    attempt_id = human_attempt(Store(db), tmp_path / "gate", status=AttemptStatus.RUNNING,
                               clock_origin=time.time() - 9000)
    code, out, err = _cli(capsys, db, "human", "adjust", attempt_id, "--pause", "2h10m", "2h20m", "--reason", "r",
                          "--json")
    assert code == 0, err
    result = json.loads(out)
    assert 7800 <= result["uncorrected_working_s"] < 7860  # 9000 s on the clock less 1200 s of pauses
    assert result["uncorrected_working_s"] - result["corrected_working_s"] == pytest.approx(600)
    code, _, err = _cli(capsys, db, "human", "adjust", attempt_id, "--pause", "2h30m", "3h", "--reason", "r")
    assert code == 2 and "ran from 0s to 2h30m" in err


@pytest.mark.parametrize(("target", "pause", "reason", "author", "message"), [
    ("999", ("10m", "20m"), "why", None, "no attempt with id 999"),
    ("AGENT", ("10m", "20m"), "why", None, "is not a human attempt"),
    ("ID", ("40m", "30m"), "why", None, "END (30m) must be after START (40m)"),
    ("ID", ("1h", "3h"), "why", None, "must lie within the attempt's clock, which ran from 0s to 2h"),
    ("ID", ("10m", "20m"), "   ", None, "invalid --reason"),
    ("ID", ("soon", "1h"), "why", None, "invalid time 'soon'"),
    ("ID", ("2026-13-40T10:00", "1h"), "why", None, "invalid time '2026-13-40T10:00'"),
    ("ID", ("1m", "5m"), "why", None, "already paused for all of it"),
    ("ID", ("25m", "35m"), "why", None, "overlaps correction #1 (30m-40m, by x)"),
    ("ID", ("10m", "20m"), "why", "", "invalid --author"),
])
def test_adjust_refuses_bad_corrections_in_one_line_and_writes_nothing(
    setup: tuple[Path, int, Path], capsys: pytest.CaptureFixture[str], target: str, pause: tuple[str, str],
    reason: str, author: str | None, message: str,
) -> None:
    db, attempt_id, _ = setup
    with Store(db).session() as session:
        agent = Attempt(environment="toy", agent="modular", budget_s=7200, status=AttemptStatus.DONE)
        session.add(agent)
        session.add(PauseCorrection(attempt_id=attempt_id, start_s=1800, end_s=2400, reason="earlier", author="x"))
        session.flush()
        agent_id = agent.id
    target = {"ID": str(attempt_id), "AGENT": str(agent_id)}.get(target, target)
    code, out, err = _cli(capsys, db, "human", "adjust", target, "--pause", *pause, "--reason", reason,
                          *(["--author", author] if author is not None else []))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert _rows(db, "SELECT count(*) FROM pause_corrections") == [(1,)]


def test_corrections_merge_with_pauses_once_and_shift_the_score_log_s_times() -> None:
    """The arithmetic on its own: a correction overlapping a recorded pause, one inside it, one after."""
    pauses = [Pause(reason="waiting", start_s=0, end_s=600), Pause(reason="break", start_s=3600, end_s=4200)]
    corrections = [PauseCorrection(start_s=1000, end_s=1200), PauseCorrection(start_s=4000, end_s=4500),
                   PauseCorrection(start_s=3700, end_s=3800)]
    assert merge([(3, 4), (0, 1), (0.5, 2)]) == [(0, 2), (3, 4)]
    # recorded working 300 s = offset 900: nothing corrected before it
    assert corrected_at(300, pauses, corrections) == 300
    # working 1000 s = offset 1600: 200 s of correction before it
    assert corrected_at(1000, pauses, corrections) == 800
    # working 3500 s = offset 4700 (after the break): 200 s + the 300 s sticking out of the break
    assert corrected_at(3500, pauses, corrections) == 3000
    assert corrected_at(3500, pauses, []) == 3500


def test_replay_lists_sessions_and_plays_only_the_output(
    setup: tuple[Path, int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, attempt_id, gate = setup
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", 1)
    assert code == 2 and "recording" in err and "missing" in err and str(gate / "casts") in err
    write_cast(gate / "casts" / "session-1.cast", [(0.5, "$ task start\r\n"), (30.0, "clock started\r\n")])
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id)
    assert code == 0, err
    assert "session 1 (pty, ended, 30 bytes in, 400 out)" in out and str(gate / "casts" / "session-1.cast") in out
    assert "session 2 (sftp, ended, 12 bytes in, 4096 out)" in out and "byte counts only" in out
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", 1, "--speed", 1000)
    assert code == 0, err
    assert out == "$ task start\r\nclock started\r\n"  # the typed input is not played
    for args, message in (((2,), "is an sftp session"), ((7,), "has no session 7; its sessions: 1, 2"),
                          ((1, "--speed", 0), "invalid --speed 0.0")):
        code, out, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", *args)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_replay_refuses_a_file_that_is_not_a_cast(
    setup: tuple[Path, int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, attempt_id, gate = setup
    (gate / "casts").mkdir(parents=True)
    (gate / "casts" / "session-1.cast").write_text('{"version": 1}\n')
    code, _, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", 1)
    assert code == 2 and "is not an asciinema v2 recording" in err
    # a recording cut short mid-line (its recorder was killed) plays what is whole
    write_cast(gate / "casts" / "session-1.cast", [(0.1, "done\r\n")], inputs=False)
    with open(gate / "casts" / "session-1.cast", "a") as cast:
        cast.write('[0.2, "o", "half')
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", 1, "--speed", 100)
    assert code == 0 and out == "done\r\n", err


def test_attempts_show_and_list_name_the_expert_recordings_and_corrections(
    setup: tuple[Path, int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, attempt_id, gate = setup
    code, _, err = _cli(capsys, db, "human", "adjust", attempt_id, "--pause", "30m", "40m",
                        "--reason", "unreported lunch", "--author", "Grace")
    assert code == 0, err
    code, out, err = _cli(capsys, db, "attempts", "show", attempt_id)
    assert code == 0, err
    assert "expert Ada Lovelace" in out and "6000.0 s as recorded, 5400.0 s corrected" in out
    assert "unreported lunch" in out and "Grace" in out
    assert str(gate / "casts" / "session-1.cast") in out
    code, out, err = _cli(capsys, db, "attempts", "show", attempt_id, "--json")
    detail = json.loads(out)
    assert detail["expert"] == "Ada Lovelace" and detail["corrected_working_s"] == 5400
    assert [(c["author"], c["reason"]) for c in detail["pause_corrections"]] == [("Grace", "unreported lunch")]
    assert [r["path"] for r in detail["recordings"]] == [str(gate / "casts" / "session-1.cast"), None]
    assert detail["recordings"][1]["bytes_out"] == 4096
    code, out, err = _cli(capsys, db, "attempts", "list", "--json")
    (row,) = json.loads(out)
    assert row["expert"] == "Ada Lovelace" and row["working_s"] == 6000 and row["corrected_working_s"] == 5400
    listed = run_cli("attempts", "list", "--db", str(db))  # 200 columns wide: every column shows
    assert listed.returncode == 0 and "Ada Lovelace" in listed.stdout, listed.stderr
    assert "6000.0 (corrected 5400.0)" in listed.stdout


def test_replay_finds_a_kept_recording_or_the_live_one_in_the_gate_folder(
    setup: tuple[Path, int, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The supervisor stores the path a session's cast is kept at once it closes; until then the cast
    is only in the gate folder."""
    db, attempt_id, gate = setup
    kept = tmp_path / "human" / f"attempt-{attempt_id}" / "casts" / "session-3.cast"
    with Store(db).session() as session:
        session.add(Event(attempt_id=attempt_id, seq=9, kind=EventKind.SSH_SESSION,
                          data=validate_event("ssh_session", {"session": 3, "mode": "exec", "command": "make",
                                                              "recording": str(kept)})))
    write_cast(gate / "casts" / "session-3.cast", [(0.1, "live\r\n")])
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", 3, "--speed", 100)
    assert code == 0 and out == "live\r\n", err
    write_cast(kept, [(0.1, "kept\r\n")])
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id, "--session", 3, "--speed", 100)
    assert code == 0 and out == "kept\r\n", err
    code, out, err = _cli(capsys, db, "human", "replay", attempt_id)
    assert f"session 3 (exec, open): make - {kept}" in out
