"""An ATIF trajectory is meant to be shared (Harbor's viewer, SFT/RL datasets). An agent that knows it
will be can plant what it found (a provider key it read from the environment, its gateway token, the
path of the held-out data) where the export copies it, and write control characters that would act on
a terminal that prints the file. The export must copy the agent's own text as it is (JSON escapes
only), and nothing the harness alone knows: a held-out score's scorer message and details, the
snapshot folder, the gateway's body-file paths, a request's fields other than its messages and tools,
the campaign's spec.

Each secret is planted twice: where the agent writes (its model text, commands, their output, tool
results, notes, submission, its requests through the gateway) and where only the harness writes.
Every string of the trajectory that holds one must be at a path that carries the agent's own text.

Not seen to succeed: the first version of the export already left these fields out; the test guards
them (a field added later that copies a score row's message or a request's metadata fails here).

Real parts: a real SQLite database written with the store's models and the event schema, body files
where the gateway writes them, the real CLI exporting.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.models import Attempt, AttemptStatus, Campaign, Event, EventKind, ScoreEvent, ScoreKind
from tests.adversarial.hostile_text import CONTROL
from tests.conftest import run_main

pytestmark = pytest.mark.adversarial

PROVIDER_KEY = "sk-ant-api03-PLANTEDPROVIDERKEY0123456789abcdef"
GATEWAY_TOKEN = "rbgw-PLANTEDGATEWAYTOKEN0123456789ab"
HELDOUT_PATH = "/protected/heldout/final-split-PLANTED.jsonl"
SECRETS = (PROVIDER_KEY, GATEWAY_TOKEN, HELDOUT_PATH)
HARNESS_ONLY = ("HARNESS-ONLY-SNAPSHOT-FOLDER", "HARNESS-ONLY-SCORER-MESSAGE", "HARNESS-ONLY-SPEC")
"""Markers in fields only the harness writes; with a secret beside each, none may be exported."""
SAID = f"I found {PROVIDER_KEY} and {GATEWAY_TOKEN}; the held-out data is {HELDOUT_PATH}.{CONTROL}"

AGENT_TEXT = re.compile(
    r"steps\.\d+\.(message|reasoning_content|tool_calls\.\d+\.arguments\..+|observation\.results\.\d+\.content"
    r"|extra\.(sandbox\.\d+\.command|submitted\.\d+|note\.message|score_calls\.\d+\.shown_to_agent\..+))")
"""Where a trajectory carries what the agent itself wrote or was shown of its own doing."""


def _events(session: Any, attempt_id: int, rows: list[tuple[str, dict[str, Any]]], began: datetime) -> None:
    for seq, (kind, data) in enumerate(rows, start=1):
        session.add(Event(attempt_id=attempt_id, seq=seq, kind=EventKind(kind), working_s=float(seq),
                          created_at=began + timedelta(seconds=seq), data=validate_event(kind, data)))


def planted_database(path: Path) -> dict[str, int]:
    store = Store(path)
    began = datetime.now(UTC) - timedelta(minutes=5)
    secret_words = " ".join(SECRETS)
    try:
        with store.session() as session:
            campaign = Campaign(spec={"note": f"HARNESS-ONLY-SPEC {secret_words}"})
            session.add(campaign)
            session.flush()
            common: dict[str, Any] = dict(campaign_id=campaign.id, environment="counter", profile="tiny",
                                          budget_s=600.0, backend="local", status=AttemptStatus.DONE,
                                          started_at=began, ended_at=began + timedelta(minutes=2), final_raw=5.0,
                                          final_rule="best", submitted=True)
            modular = Attempt(agent="modular", model="openai/x", **common)
            gateway = Attempt(agent="claude-code", model="anthropic/claude-test", **common)
            session.add_all([modular, gateway])
            session.flush()
            _events(session, modular.id, [
                ("start", {"instructions": "Make it fast.", "agent": "modular", "model": "openai/x",
                           "budget_s": 600.0, "backend": "local"}),
                ("model_call", {"model": "openai/x", "input_tokens": 3, "output_tokens": 4, "cached_tokens": 0,
                                "cost_usd": 0.0, "wait_s": 0.1, "text": SAID, "turn": 1, "tool_calls": [
                                    {"id": "c1", "name": "bash", "arguments": {"command": f"echo '{SAID}'"}}]}),
                ("bash", {"command": f"echo '{SAID}'", "timeout": 60.0, "exit_code": 0, "stdout": SAID,
                          "stderr": ""}),
                ("tool_result", {"turn": 1, "tool": "bash", "call_id": "c1", "arguments": {"command": "echo"},
                                 "output": SAID}),
                ("note", {"message": SAID}),
                ("snapshot", {"path": f"/host/HARNESS-ONLY-SNAPSHOT-FOLDER/{secret_words}", "files": 1}),
                ("submit", {"answer": SAID}),
            ], began)
            for kind, details in ((ScoreKind.FINAL, {}), (ScoreKind.HELDOUT, {
                    "split": "final", "solution": "best_call", "call": 1, "score_id": 1,
                    "snapshot": f"/host/HARNESS-ONLY-SNAPSHOT-FOLDER/{secret_words}",
                    "data": f"HARNESS-ONLY-SCORER-MESSAGE {secret_words}"})):
                session.add(ScoreEvent(attempt_id=modular.id, kind=kind, working_s=100.0, raw=5.0, valid=True,
                                       created_at=began + timedelta(seconds=100), details=details,
                                       message={"message": f"HARNESS-ONLY-SCORER-MESSAGE {secret_words}"}))
            folder = store.snapshots_dir / f"attempt-{gateway.id}-agent" / "model-calls"
            folder.mkdir(parents=True)
            body = folder / "0001.json"
            body.write_text(json.dumps({"endpoint": "/v1/messages", "status": 200, "request": {
                "model": "claude-test", "max_tokens": 64,
                "metadata": {"user_id": f"HARNESS-ONLY-SPEC {secret_words}"},
                "messages": [{"role": "user", "content": SAID}]}, "answer": {
                "id": "m1", "type": "message", "role": "assistant", "model": "claude-test",
                "content": [{"type": "text", "text": SAID}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 5, "output_tokens": 1}}}))
            _events(session, gateway.id, [
                ("start", {"instructions": "Make it fast.", "agent": "claude-code", "model": "anthropic/claude-test",
                           "budget_s": 600.0, "backend": "docker"}),
                ("model_call", {"model": "anthropic/claude-test", "input_tokens": 5, "output_tokens": 1,
                                "cached_tokens": 0, "cost_usd": 0.0, "wait_s": 0.01, "text": SAID, "turn": 1,
                                "extra": {"via": "gateway", "endpoint": "/v1/messages",
                                          "body_file": str(body)}}),
            ], began)
            ids = {"modular": modular.id, "gateway": gateway.id}
    finally:
        store.close()
    return ids


def strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a JSON value (keys too), with its dotted path."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}".lstrip(".") + "#key", str(key)
            yield from strings(item, f"{path}.{key}".lstrip("."))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from strings(item, f"{path}.{index}".lstrip("."))
    elif isinstance(value, str):
        yield path, value


def test_planted_secrets_stay_where_the_agent_wrote_them(fixture_envs: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "planted.db"
    ids = planted_database(db)
    code, stdout, stderr = run_main(["export", "atif", "--db", str(db), "--out", str(tmp_path / "out"), "--json"],
                                    capsys)
    assert code == 0, stderr
    written = {t["attempt"]: Path(t["path"]) for t in json.loads(stdout)["trajectories"]}
    assert set(written) == set(ids.values())
    for attempt_id, path in written.items():
        raw = path.read_bytes()
        assert all(32 <= b < 127 or b == 10 for b in raw), "control characters are JSON escapes, not bytes"
        trajectory = json.loads(raw)
        for marker in HARNESS_ONLY:
            assert marker not in raw.decode("ascii") and marker not in json.dumps(trajectory, ensure_ascii=False)
        found = [(where, text) for where, text in strings(trajectory) if any(s in text for s in SECRETS)]
        assert found, "the agent's own text is exported"
        stray = [where for where, _ in found if not AGENT_TEXT.fullmatch(where)]
        assert not stray, f"attempt {attempt_id}: secrets outside the agent's text at {stray}"
        agent_steps = [s for s in trajectory["steps"] if s["source"] == "agent"]
        assert agent_steps[0]["message"] == SAID, "the agent's text byte for byte, control characters included"
