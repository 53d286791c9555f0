"""Durations typed by users (`90s`, `30m`, `1h30m`, `2h`) into seconds and back."""

from __future__ import annotations

import re

from rebench.errors import RebenchError

_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Parse `2h`, `30m`, `1h30m`, `90s` or `1h2m3s` into whole seconds.

    Bare numbers are refused on purpose: "30" could mean seconds or minutes, and a
    budget typed wrong silently wastes hours of GPU time.
    """
    value = text.strip().lower()
    match = _DURATION.match(value)
    if not value or match is None or not any(match.groups()):
        raise RebenchError(
            f"invalid duration {text!r}: use hours, minutes and seconds like 2h, 30m, 1h30m or 90s"
        )
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise RebenchError(f"invalid duration {text!r}: must be longer than zero")
    return total


def format_duration(seconds: float) -> str:
    """Render seconds the way users type them (`1h30m`, `45s`), for tables and labels."""
    remaining = round(seconds)
    if remaining <= 0:
        return "0s"
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
