"""Strings an agent writes to be read on the operator's terminal, and a database whose every text
field an agent or an outside file can fill holds them: a campaign with a finished and a running
attempt of an agent and an environment with hostile names, their events, score log and notes, and a
human attempt with a hostile expert name.

`problems` says what in a terminal's output is not shown as text: no control character but newline
and tab, no escape sequence but the colours rich itself draws (and the cursor moves of a live view),
no blinking, no hyperlink."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Campaign,
    CampaignStatus,
    Event,
    EventKind,
    HumanSession,
    Pause,
    ScoreEvent,
    ScoreKind,
)

MARKUP = "[/unbalanced] [link=https://evil.example/x]CLICK[/link] [blink]BLINK[/blink] [bold red]loud"
CONTROL = ("\x1b[2J\x1b]8;;https://evil.example/y\x1b\\OSC8\x1b]8;;\x1b\\ \x1b[5mSGR5 \x9b31mC1 "
           "\u202eRLO\u202c \u2066LRI\u2069 \x07\x08\r\x00\x7f end")
HOSTILE = f"{MARKUP} {CONTROL}"
AGENT = "evil[/a]$\\frac{$\x1b[5m\u202e"
ENVIRONMENT = "counter"  # a real environment (tests/fixtures/envs), so reports and re-scores reach the rows
ODD_ENVIRONMENT = "env[/e]$\\frac{$[link=https://evil.example/e]E\x1b]8;;https://evil.example/e\x07"
EXPERT = "Mallory [/x][blink]\x1b[5m\u202e"

VISIBLE = ("[/unbalanced]", "[link=https://evil.example/x]CLICK[/link]", "[blink]BLINK[/blink]")
"""What an operator must see of HOSTILE, word for word."""

_DRAWN = re.compile(r"\x1b\[[0-9;]*m")
"""rich's own colours (select graphic rendition); anything else from ESC on is not rich's."""
_LIVE = re.compile(r"\x1b\[\?25[lh]|\x1b\[[0-9]*[AK]|\r")
"""A live view's cursor: hidden, shown, up a line, line erased, back to the line's start."""
_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def problems(out: str, *, live: bool = False) -> list[str]:
    """What in a terminal's output an agent's text produced there (empty: nothing)."""
    found = []
    if "\x1b[5m" in out:
        found.append("blinking text")
    if "\x1b]" in out:
        found.append("an operating system command (hyperlink)")
    rest = _DRAWN.sub("", out)
    if live:
        rest = _LIVE.sub("", rest)
    for char in sorted(set(rest)):
        code = ord(char)
        if (code < 32 and char not in "\n\t") or 0x7F <= code <= 0x9F or char in _BIDI:
            found.append(f"control character U+{code:04X}")
    return found


def plain(out: str) -> str:
    """The output without rich's colours: what the operator reads."""
    return _DRAWN.sub("", out)


def hostile_database(path: Path, gate_dir: Path) -> dict[str, int]:
    """The rows; returns the ids: campaign, done (finished attempt), running, odd (unknown env), human."""
    store = Store(path)
    now = datetime.now(UTC)
    try:
        with store.session() as session:
            campaign = Campaign(spec={"note": HOSTILE}, status=CampaignStatus.RUNNING)
            session.add(campaign)
            session.flush()
            done = Attempt(campaign_id=campaign.id, environment=ENVIRONMENT, profile="tiny", agent=AGENT,
                           model=f"model {MARKUP}", budget_s=600.0, backend="local", status=AttemptStatus.DONE,
                           wall_s=30.0, working_s=20.0, submitted=True, final_raw=5.0, final_normalized=0.5,
                           error_message=f"agent said {HOSTILE}", error_source="agent", final_rule="best",
                           snapshot_path=str(path.parent / "no-such-snapshot"))
            running = Attempt(campaign_id=campaign.id, environment=ENVIRONMENT, profile="tiny", agent=AGENT,
                              budget_s=600.0, backend="local", status=AttemptStatus.RUNNING,
                              started_at=now - timedelta(seconds=30))
            odd = Attempt(campaign_id=campaign.id, environment=ODD_ENVIRONMENT, profile="tiny", agent=AGENT,
                          budget_s=600.0, backend="local", status=AttemptStatus.DONE, wall_s=10.0, working_s=5.0,
                          final_raw=1.0, final_normalized=0.1)
            session.add_all([done, running, odd])
            session.flush()
            events = [
                ("bash", {"command": f"echo '{HOSTILE}'", "timeout": 60.0, "exit_code": 0,
                          "stdout": HOSTILE, "stderr": HOSTILE}),
                ("write_file", {"path": f"/home/agent/{MARKUP}.py", "bytes": 3, "content": HOSTILE}),
                ("model_call", {"model": "m", "input_tokens": 3, "output_tokens": 4, "cached_tokens": 0,
                                "cost_usd": 0.0, "wait_s": 0.1, "text": HOSTILE,
                                "tool_calls": [{"name": f"bash{MARKUP}", "arguments": {"c": HOSTILE}}]}),
                ("note", {"message": HOSTILE, "data": {"why": HOSTILE}}),
                ("submit", {"answer": HOSTILE}),
            ]
            for seq, (kind, data) in enumerate(events, start=1):
                session.add(Event(attempt_id=done.id, seq=seq, kind=EventKind(kind), working_s=float(seq),
                                  data=validate_event(kind, data)))
            session.add(Event(attempt_id=running.id, seq=1, kind=EventKind.NOTE, working_s=10.0,
                              created_at=now - timedelta(seconds=5), data=validate_event("note", {"message": "x"})))
            for attempt_id, kind in ((done.id, ScoreKind.INTERMEDIATE), (done.id, ScoreKind.FINAL),
                                     (running.id, ScoreKind.INTERMEDIATE)):
                session.add(ScoreEvent(attempt_id=attempt_id, kind=kind, working_s=10.0, raw=5.0, valid=True,
                                       message={"message": f"scorer said {HOSTILE}"}))
            session.add(Pause(attempt_id=done.id, reason=f"pause {MARKUP}", start_s=0.0, end_s=1.0))
            human = Attempt(environment=ENVIRONMENT, profile="tiny", agent="human", budget_s=3600.0,
                            backend="docker", status=AttemptStatus.DONE, wall_s=100.0, working_s=90.0,
                            submitted=True, final_raw=4.0)
            session.add(human)
            session.flush()
            session.add(HumanSession(attempt_id=human.id, expert=EXPERT, public_key="ssh-ed25519 AAAAC3Nza test",
                                     key_fingerprint=f"SHA256:{MARKUP}", port=2222, gate_dir=str(gate_dir),
                                     clock_origin=now.timestamp() - 100))
            session.add(ScoreEvent(attempt_id=human.id, kind=ScoreKind.INTERMEDIATE, working_s=50.0, raw=4.0,
                                   valid=True, message={"message": HOSTILE}))
            session.add(Pause(attempt_id=human.id, reason=f"break {CONTROL}", start_s=10.0, end_s=20.0))
            ids = {"campaign": campaign.id, "done": done.id, "running": running.id, "odd": odd.id,
                   "human": human.id}
    finally:
        store.close()
    return ids
