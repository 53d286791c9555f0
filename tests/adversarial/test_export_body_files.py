"""The export reads an installed agent's request and answer from the body file its `model_call` event
names. A row naming another file (a database edited, copied from elsewhere, or a link planted in the
attempt's folder) would have `rebench export inspect` copy that file into a log meant to be shared:
a key file, another attempt's transcript. Only files in the attempt's own `model-calls` folder under
the database's snapshot folder are read, with no link on the way.

Seen to succeed before the defence: with the exporter opening the named path as given, the outside
file's marker was in the exported log.

Real parts: the installed agents' gateway and the `anthropic` SDK against the fake model server, the
runner's recorder on a real SQLite database, the real CLI exporting, Inspect reading the log back
(tests/test_inspect_gateway_calls.py).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from rebench.agents.base import ModelUsage
from tests.test_inspect_gateway_calls import body_folder, claude_attempt, export, model_events

pytestmark = [pytest.mark.adversarial]

MARKER = "OUTSIDE-FILE-7d1e"


def test_a_body_file_named_outside_the_attempts_folder_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ctx = claude_attempt(tmp_path, monkeypatch)
    folder = body_folder(ctx)
    body = json.dumps({"endpoint": "/v1/messages", "status": 200, "answer": None,
                       "request": {"messages": [{"role": "user", "content": MARKER}]}})
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / folder.parent.name / "model-calls").mkdir(parents=True)
    secret = elsewhere / "secret.json"
    secret.write_text(body)
    lookalike = elsewhere / folder.parent.name / "model-calls" / "0002.json"  # this attempt's names, another folder
    lookalike.write_text(body)
    (folder / "0003.json").symlink_to(secret)
    named = [str(secret), str(folder / ".." / ".." / "elsewhere" / "secret.json"), str(folder / "0003.json"),
             str(lookalike)]
    for turn, path in enumerate(named, start=3):
        ctx.record_model_call(ModelUsage(model="anthropic/claude-test-model", input_tokens=5, output_tokens=1,
                                         wait_s=0.01, extra={"via": "gateway", "endpoint": "/v1/messages",
                                                             "body_file": path}), text="", turn=turn)
    ctx.recorder.flush()
    out = tmp_path / "logs"
    events = model_events(export(ctx.store.path, out, capsys)[ctx.recorder.attempt_id])
    assert len(events) == 2 + len(named)
    notes = [event.metadata["request"] for event in events[2:]]
    assert "not in this attempt's model-calls folder" in notes[0] and "not in this" in notes[1]
    assert "leads out of the snapshot folder" in notes[2]
    # the look-alike path is taken as a name: the attempt's own 0002.json is read, never the other
    assert events[5].input == events[1].input and events[5].input[1].text.startswith("Make solution.py")
    for log in out.glob("*.eval"):
        with zipfile.ZipFile(log) as archive:
            for member in archive.namelist():
                assert MARKER.encode() not in archive.read(member), member
