"""`rebench human adjust|replay`: audited corrections of a human attempt's clock, and its recordings.

The logic is in rebench.human.audit (and rebench.store.worktime for working time); this is the shell.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from rebench.budget import format_duration
from rebench.cli.common import DbOption, JsonOption, console, open_store, print_json
from rebench.errors import RebenchError


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `human` group."""
    app.command("adjust")(adjust_command)
    app.command("replay")(replay_command)


def adjust_command(
    attempt_id: Annotated[int, typer.Argument(metavar="ID", help="The human attempt.")],
    pause: Annotated[tuple[str, str], typer.Option(
        "--pause", metavar="START END",
        help="The break to add, as offsets from the start of the attempt's clock (1h20m, 90m, 4800s, 4800) "
             "or dates and times (2026-11-30T14:05:00Z).")],
    reason: Annotated[str, typer.Option("--reason", help="Why: stored with the correction.")],
    author: Annotated[str | None, typer.Option(
        "--author", help="Who makes the correction (default: your login name).")] = None,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """Add a pause to a human attempt after the fact, with who and why; the recorded clock stays as it was."""
    from rebench.human.audit import adjust, span_text

    store = open_store(db)
    with store.session() as session:
        row, spent = adjust(session, attempt_id, pause[0], pause[1], reason, author)
        result = {"attempt": attempt_id, "correction": row.id, "start_s": row.start_s, "end_s": row.end_s,
                  "reason": row.reason, "author": row.author, "uncorrected_working_s": spent.uncorrected_s,
                  "corrected_working_s": spent.corrected_s}
    if json_output:
        print_json(result)
        return
    console.print(
        f"attempt {attempt_id}: correction #{result['correction']} adds a pause "
        f"{span_text(row.start_s, row.end_s)} by {row.author} ({row.reason})\n"
        f"working time {format_duration(spent.uncorrected_s)} uncorrected ({spent.uncorrected_s:.0f} s), "
        f"{format_duration(spent.corrected_s)} corrected ({spent.corrected_s:.0f} s)",
        highlight=False, markup=False)


def replay_command(
    attempt_id: Annotated[int, typer.Argument(metavar="ID", help="The human attempt.")],
    session_number: Annotated[int | None, typer.Option(
        "--session", metavar="N", help="Play this session's recording (without it: list the sessions).")] = None,
    speed: Annotated[float, typer.Option("--speed", help="Play this many times faster than recorded.")] = 1.0,
    max_idle: Annotated[float, typer.Option(
        "--max-idle", help="Longest pause between two outputs, in seconds of the recording.")] = 2.0,
    db: DbOption = None,
    json_output: JsonOption = False,
) -> None:
    """List a human attempt's SSH sessions, or play one session's terminal recording."""
    from rebench.human.audit import human_attempt, session_lines, ssh_sessions
    from rebench.sandbox.cast import play_cast

    if not speed > 0:
        raise RebenchError(f"invalid --speed {speed}: must be above 0 (2 plays twice as fast)")
    if not max_idle >= 0:
        raise RebenchError(f"invalid --max-idle {max_idle}: must be 0 seconds or more")
    store = open_store(db)
    with store.session() as session:
        _, human = human_attempt(session, attempt_id)
        sessions = ssh_sessions(session, attempt_id, human.gate_dir)
    if session_number is None:
        if json_output:
            print_json(sessions)
        elif not sessions:
            console.print(f"attempt {attempt_id} has no SSH sessions yet", highlight=False)
        else:
            for line in session_lines(sessions):
                console.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    chosen = next((s for s in sessions if s["session"] == session_number), None)
    if chosen is None:
        known = ", ".join(str(s["session"]) for s in sessions) or "none"
        raise RebenchError(f"attempt {attempt_id} has no session {session_number}; its sessions: {known}")
    if chosen["path"] is None:
        why = "is an sftp session: only its byte counts are recorded" if chosen["mode"] == "sftp" else "has no recording"
        raise RebenchError(f"attempt {attempt_id} session {session_number} {why}")
    path = Path(chosen["path"])
    if not path.is_file():
        raise RebenchError(f"attempt {attempt_id} session {session_number}: recording {str(path)!r} is missing")
    play_cast(path, sys.stdout, speed=speed, max_idle=max_idle)
