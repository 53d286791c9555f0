"""A finished human attempt written with the store API, as the supervisor leaves it: its human
session, recorded pauses, score log and `ssh_session` events pointing at casts in its gate folder."""

from __future__ import annotations

import json
from pathlib import Path

from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Event,
    EventKind,
    HumanSession,
    Pause,
    ScoreEvent,
    ScoreKind,
)

CLOCK_ORIGIN = 1_800_000_000.0
WALL_S = 7200.0
PAUSES = (("waiting", 0.0, 600.0), ("break", 3600.0, 4200.0))
WORKING_S = WALL_S - 600.0 - 600.0


def write_cast(path: Path, outputs: list[tuple[float, str]], *, inputs: bool = True) -> Path:
    """An asciinema v2 recording: header line, then [t, code, data] lines (an input event before each output)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"version": 2, "width": 80, "height": 24, "timestamp": int(CLOCK_ORIGIN)})]
    for t, text in outputs:
        if inputs:
            lines.append(json.dumps([max(0.0, t - 0.01), "i", "typed-secret\r"]))
        lines.append(json.dumps([t, "o", text]))
    path.write_text("\n".join(lines) + "\n")
    return path


def human_attempt(store: Store, gate_dir: Path, *, environment: str = "toy", profile: str = "tiny",
                  budget_s: float = WALL_S, expert: str = "Ada Lovelace", status: AttemptStatus = AttemptStatus.DONE,
                  scores: tuple[tuple[float, float], ...] = (), final_raw: float | None = 5.0,
                  clock_origin: float = CLOCK_ORIGIN) -> int:
    """One human attempt: 2 h on the clock, waiting 10 min, a 10 min break at 1 h; two SSH sessions
    (a shell recorded at casts/session-1.cast, an sftp session with byte counts only)."""
    with store.session() as session:
        attempt = Attempt(environment=environment, profile=profile, agent="human", model=None, budget_s=budget_s,
                          backend="docker", status=status, wall_s=WALL_S, working_s=WORKING_S, submitted=True,
                          final_raw=final_raw)
        session.add(attempt)
        session.flush()
        session.add(HumanSession(attempt_id=attempt.id, expert=expert, public_key="ssh-ed25519 AAAAC3Nza test",
                                 key_fingerprint="SHA256:test", port=2222, gate_dir=str(gate_dir),
                                 clock_origin=clock_origin))
        for reason, start, end in PAUSES:
            session.add(Pause(attempt_id=attempt.id, reason=reason, start_s=start, end_s=end))
        for working_s, raw in scores:
            session.add(ScoreEvent(attempt_id=attempt.id, kind=ScoreKind.INTERMEDIATE, working_s=working_s, raw=raw,
                                   valid=True))
        rows = [
            {"session": 1, "mode": "pty", "recording": "casts/session-1.cast"},
            {"session": 2, "mode": "sftp", "bytes_in": 10, "bytes_out": 2048},
            {"session": 1, "mode": "pty", "recording": "casts/session-1.cast", "ended": True, "bytes_in": 30,
             "bytes_out": 400},
            {"session": 2, "mode": "sftp", "ended": True, "bytes_in": 12, "bytes_out": 4096},
        ]
        for seq, data in enumerate(rows, start=1):
            session.add(Event(attempt_id=attempt.id, seq=seq, kind=EventKind.SSH_SESSION, working_s=60.0 * seq,
                              data=validate_event("ssh_session", data)))
        return attempt.id
