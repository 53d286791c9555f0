"""Audited corrections of a human attempt's clock and its SSH sessions' recordings (`rebench human
adjust|replay`, `rebench attempts show`).

A correction never edits what was recorded: it is a `PauseCorrection` row (who, why, when) and
reports show working time with and without it (rebench.store.worktime). A recording is an asciinema
v2 cast: a JSON header line, then `[t, "o"|"i", data]` lines; replay plays only the output.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rebench.budget import format_duration, parse_duration
from rebench.errors import RebenchError
from rebench.store.models import Attempt, Event, EventKind, HumanSession, Pause, PauseCorrection
from rebench.store.worktime import WorkingTime, covered, span_end, working_time

_SECONDS = re.compile(r"^\d+(\.\d+)?$")
_ZERO = re.compile(r"^0+[hms]?$")


def parse_offset(text: str, human: HumanSession) -> float:
    """An offset from the attempt clock's start: `1h20m`, `90m`, `4800s`, `4800` (seconds), or a
    time of day with its date (`2026-11-30T14:05:00Z`; without a zone it is this machine's local time)."""
    value = text.strip().lower()
    if _SECONDS.match(value):
        return float(value)
    if _ZERO.match(value):
        return 0.0
    if re.match(r"^\d{4}-\d{2}-\d{2}[t ]", value):
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            raise RebenchError(f"invalid time {text!r}: write it like 2026-11-30T14:05:00Z") from None
        if human.clock_origin is None:
            raise RebenchError(f"invalid time {text!r}: attempt {human.attempt_id}'s clock has not started, "
                               "so a time of day cannot be placed on it")
        return moment.astimezone().timestamp() - human.clock_origin
    try:
        return float(parse_duration(value))
    except RebenchError:
        raise RebenchError(
            f"invalid time {text!r}: give an offset from the start of the attempt's clock like 1h20m, 90m, "
            "4800s or 4800 (seconds), or a date and time like 2026-11-30T14:05:00Z") from None


def human_attempt(session: Session, attempt_id: int) -> tuple[Attempt, HumanSession]:
    """The attempt and its human side, or a one-line error saying why there is none."""
    attempt = session.get(Attempt, attempt_id)
    if attempt is None:
        raise RebenchError(f"no attempt with id {attempt_id}")
    human = session.get(HumanSession, attempt_id)
    if human is None:
        raise RebenchError(f"attempt {attempt_id} is not a human attempt (agent {attempt.agent!r}, source "
                           f"{attempt.source}); only attempts started with `rebench human start` have these")
    return attempt, human


def clock_rows(session: Session, attempt_id: int) -> tuple[list[Pause], list[PauseCorrection]]:
    """The attempt's recorded pauses and its pause corrections, oldest first."""
    pauses = list(session.scalars(select(Pause).where(Pause.attempt_id == attempt_id).order_by(Pause.id)))
    corrections = list(session.scalars(
        select(PauseCorrection).where(PauseCorrection.attempt_id == attempt_id).order_by(PauseCorrection.id)))
    return pauses, corrections


def _operator() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise RebenchError("cannot tell who you are (no $USER and no login name): give --author NAME") from None


def span_text(start: float, end: float) -> str:
    return f"{format_duration(start)}-{format_duration(end)}"


def adjust(session: Session, attempt_id: int, start_text: str, end_text: str, reason: str,
           author: str | None, now: float | None = None) -> tuple[PauseCorrection, WorkingTime]:
    """Check one correction against the attempt and add it; every refusal is a RebenchError before
    anything is written."""
    attempt, human = human_attempt(session, attempt_id)
    start, end = parse_offset(start_text, human), parse_offset(end_text, human)
    given = f"--pause {start_text} {end_text}"
    if end <= start:
        raise RebenchError(f"invalid {given}: END ({format_duration(end)}) must be after START "
                           f"({format_duration(start)})")
    last = span_end(attempt, human, now)
    if start < 0 or end > last:
        raise RebenchError(f"invalid {given}: the interval must lie within the attempt's clock, which ran "
                           f"from 0s to {format_duration(last)} ({last:.0f} s)")
    if not reason.strip():
        raise RebenchError("invalid --reason: it must say why the correction is made (it is stored with it)")
    who = (author if author is not None else _operator()).strip()
    if not who:
        raise RebenchError("invalid --author: empty; give the name of whoever makes the correction")
    pauses, corrections = clock_rows(session, attempt_id)
    for earlier in corrections:
        if start < earlier.end_s and earlier.start_s < end:
            raise RebenchError(f"invalid {given}: it overlaps correction #{earlier.id} "
                               f"({span_text(earlier.start_s, earlier.end_s)}, by {earlier.author}); "
                               "each stretch of time is corrected once")
    recorded = [(p.start_s, p.end_s if p.end_s is not None else last) for p in pauses]
    if covered(recorded, start, end) >= end - start:
        raise RebenchError(f"invalid {given}: the clock was already paused for all of it (recorded pauses)")
    row = PauseCorrection(attempt_id=attempt_id, start_s=start, end_s=end, reason=reason.strip(), author=who)
    session.add(row)
    session.flush()
    return row, working_time(attempt, pauses, [*corrections, row], human, now)


def ssh_sessions(session: Session, attempt_id: int, gate_dir: str | None) -> list[dict[str, Any]]:
    """The attempt's SSH sessions from its `ssh_session` events (a session's later events update
    the earlier ones), each with `path`: where its recording is stored (a relative `recording`
    lies in the attempt's gate folder), or None when it has none."""
    merged: dict[int, dict[str, Any]] = {}
    events = session.scalars(select(Event).where(Event.attempt_id == attempt_id,
                                                 Event.kind == EventKind.SSH_SESSION).order_by(Event.seq))
    for event in events:
        data = {k: v for k, v in event.data.items() if k != "v" and v is not None}
        merged.setdefault(int(data["session"]), {"working_s": round(event.working_s, 2)}).update(data)
    out = []
    for number, data in sorted(merged.items()):
        recording = data.get("recording")
        path = _recording_path(recording, gate_dir) if recording else None
        out.append({"session": number, "mode": data.get("mode"), "command": data.get("command"),
                    "recording": recording, "path": str(path) if path else None, "ended": bool(data.get("ended")),
                    "bytes_in": data.get("bytes_in"), "bytes_out": data.get("bytes_out"),
                    "working_s": data["working_s"]})
    return out


def _recording_path(recording: str, gate_dir: str | None) -> Path:
    """Where a recording is: the stored path (the supervisor keeps each closed session's cast with the
    attempt), else, while the session is open and its cast not yet kept, the one in the gate folder.
    A path that exists nowhere is returned as stored, for the error to name it."""
    stored = Path(recording)
    candidates = [stored]
    if gate_dir:
        candidates += [Path(gate_dir) / recording, Path(gate_dir) / "casts" / stored.name]
    return next((c for c in candidates if c.is_file()), candidates[1] if gate_dir and not stored.is_absolute()
                else stored)


def session_lines(sessions: list[dict[str, Any]]) -> Iterator[str]:
    """One line per SSH session: mode, state, bytes, command, and where its recording is."""
    for s in sessions:
        what = s["command"] or ("interactive shell" if s["mode"] == "pty" else s["mode"])
        where = s["path"] or ("byte counts only" if s["mode"] == "sftp" else "no recording")
        state = "ended" if s["ended"] else "open"
        moved = f", {s['bytes_in']} bytes in, {s['bytes_out']} out" if s["bytes_in"] is not None else ""
        yield f"session {s['session']} ({s['mode']}, {state}{moved}): {what} - {where}"
