"""Reading the asciinema v2 casts that a human attempt's SSH sessions are recorded in.

A cast is one JSON header line ({"version": 2, "width", "height", "timestamp", ...}) and then
one line per event, `[seconds since the start, "o" | "i", text]`: "o" what the terminal
showed, "i" what the expert typed. The recorder is rebench/sandbox/human/relay.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rebench.errors import RebenchError

CastEvent = tuple[float, str, str]


def load_cast(path: Path) -> tuple[dict[str, Any], list[CastEvent]]:
    """The header and the events of a cast; a torn last line (the session was cut) is skipped,
    any other bad line is an error."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise RebenchError(f"cannot read the recording {path}: {exc.strerror or exc}") from None
    try:
        header = json.loads(lines[0]) if lines else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("version") != 2:
        raise RebenchError(f"{path} is not an asciinema v2 recording (its first line is no v2 header)")
    events: list[CastEvent] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            at, kind, data = json.loads(line)
            events.append((float(at), str(kind), str(data)))
        except (ValueError, TypeError):
            if number == len(lines):
                break  # cut short: the recorder was killed mid-write
            raise RebenchError(f"{path} line {number} is not a [time, code, data] event") from None
    return header, events


def play_cast(
    path: Path,
    out: TextIO,
    speed: float = 1.0,
    max_idle: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Write a cast's output events to `out` with their timing, `speed` times faster, no pause
    longer than `max_idle` seconds (before scaling)."""
    if speed <= 0:
        raise RebenchError(f"replay speed must be above 0, not {speed:g}")
    _, events = load_cast(path)
    last = 0.0
    for at, kind, data in events:
        if kind != "o":
            continue
        wait = min(max(0.0, at - last), max_idle) / speed
        last = at
        if wait > 0:
            sleep(wait)
        out.write(data)
        out.flush()
