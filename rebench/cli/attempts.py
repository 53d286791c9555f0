"""`rebench attempts list|show`."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.orm import Session

from rebench.budget import format_duration
from rebench.cli.common import DbOption, JsonOption, console, fmt, open_store, print_json
from rebench.errors import RebenchError
from rebench.gateway.usage import MeterUsage, gateway_usage
from rebench.literal import literal, literal_text
from rebench.report.known_environments import default_info
from rebench.report.tree import tree_from_events, tree_lines
from rebench.scoring.rescore import WindowAnchors
from rebench.scoring.window import WINDOW, window_anchors
from rebench.store.models import (
    ATTEMPT_STATUSES,
    Attempt,
    Event,
    EventKind,
    HumanSession,
    Pause,
    ScoreEvent,
    ScoreKind,
)
from rebench.tables import Col, print_table

app = typer.Typer(help="Inspect attempts: their status, score log and events.", no_args_is_help=True, add_completion=False)

LIST_COLUMNS = ("id", "campaign", "environment", "profile", "agent", "model", "budget", "status",
                "submitted", "error_source", "final_raw", "normalized", "working_s")
KEY_COLUMNS = ("id", "environment", "agent")
DROP_FIRST = ("working_s", "profile", "final_raw", "campaign", "error_source", "budget", "model", "normalized",
              "submitted", "status")
"""At a narrow width these columns are left out in this order; the keys a user copies into the
next command (id, environment, agent) always stay whole."""


def _human_fields(session: Session, a: Attempt, human: HumanSession | None) -> dict[str, Any]:
    """A human attempt's expert and its working time with pause corrections (`rebench human adjust`)."""
    if human is None:
        return {}
    from rebench.human.audit import clock_rows
    from rebench.store.worktime import working_time

    pauses, corrections = clock_rows(session, a.id)
    spent = working_time(a, pauses, corrections, human)
    return {"expert": human.expert, "corrected_working_s": round(spent.corrected_s, 2),
            "corrections": len(corrections)}


def _attempt_row(a: Attempt) -> dict[str, Any]:
    return {
        "id": a.id, "campaign": a.campaign_id, "environment": a.environment, "profile": a.profile,
        "agent": a.agent, "model": a.model, "budget": format_duration(a.budget_s), "status": a.status,
        "submitted": a.submitted, "error_source": a.error_source, "final_raw": a.final_raw, "normalized": a.final_normalized,
        "working_s": round(a.working_s, 2),
        # how final_raw was taken, and RE-Bench's own rule beside it (they differ when re-scored)
        "final_rule": a.final_rule, "rule_raw": a.rule_raw, "rule_normalized": a.rule_normalized,
        "network": a.network,
        # which rebench and which exact environment folder ran it (rebench.provenance, Environment.content_hash)
        "rebench_version": a.rebench_version, "env_hash": a.env_hash,
    }


def provenance_line(detail: dict[str, Any]) -> str:
    """Which code produced the attempt: the rebench that ran it and its environment's content hash."""
    env = f"{detail['environment']} {detail['env_version'] or '(no version)'}"
    if detail["rebench_version"] is None:
        return f"ran on {env}; rebench version and environment hash not recorded ({detail['source']} attempt)"
    return f"ran on rebench {detail['rebench_version']}, {env} (content hash {detail['env_hash']})"


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return fmt(value)
    return "-" if value is None else str(value)


def network_line(network: str, backend: str | None, source: str) -> str:
    """What the attempt's sandbox could reach (rebench.network): results with and without network
    are not comparable, so `attempts show` always says it."""
    if source == "imported":
        return f"network {network} (METR's run: RE-Bench gave every task internet access)"
    if backend == "local":
        return f"network {network} (not enforced: the local backend's commands have the host's network)"
    if network == "full":
        return "network full (its own bridged network, the host closed to it): not comparable with attempts without"
    return "network none (loopback only)"


def _rule_note(detail: dict[str, Any]) -> str:
    """How the final number was taken, with RE-Bench's rule beside a re-scored one."""
    if detail["final_rule"] != "rescore_best":
        return f", rule {detail['final_rule']}" if detail["final_rule"] else ""
    repeats = sum(1 for s in detail["scores"] if s["kind"] == "rescore")
    failed = f", {detail['rescore_failed']} failed" if detail["rescore_failed"] else ""
    return (f", re-scored ({repeats} re-scores{failed}); RE-Bench rule (best intermediate): raw "
            f"{fmt(detail['rule_raw'], 4)}, normalized {fmt(detail['rule_normalized'])}")


def _window_detail(attempt: Attempt, session: Session) -> dict[str, Any] | None:
    """The anchors measured in the attempt's re-scoring window (rebench.scoring.window), from its
    score rows, and whether its final score was normalized with them; None without such rows."""
    rows = list(session.scalars(select(ScoreEvent).where(
        ScoreEvent.attempt_id == attempt.id,
        ScoreEvent.kind.in_([ScoreKind.ANCHOR_START, ScoreKind.ANCHOR_REFERENCE]))))
    if not rows:
        return None
    env = default_info().folder(attempt.environment)
    if env is not None and attempt.profile in env.metadata.profiles:
        window = window_anchors(rows, env.profile(attempt.profile).direction)
    else:  # no environment folder here: the medians the runner noted when it re-scored
        notes = [e.data.get("data", {}).get("anchors") for e in session.scalars(select(Event).where(
            Event.attempt_id == attempt.id, Event.kind == EventKind.NOTE).order_by(Event.seq))
            if e.data.get("message") == "re-scored"]
        window = WindowAnchors.model_validate(notes[-1]) if notes and notes[-1] else None
    if window is None:
        return None
    return {**window.model_dump(), "used": attempt.anchors_kind == WINDOW}


def _window_line(window: dict[str, Any]) -> str:
    def side(median: float | None, raws: list[float | None]) -> str:
        return f"{fmt(median, 4)} (median of {', '.join(fmt(r, 4) for r in raws)})"

    used = ("the final score is normalized with them; intermediate scores with the anchors in force"
            if window["used"] else "not used (an anchor had no valid median, or re-scoring did not finish)")
    return (f"window anchors, measured beside the re-scores: start {side(window['start'], window['start_raws'])}, "
            f"reference {side(window['reference'], window['reference_raws'])}; {used}")


@app.command("list")
def list_command(
    db: DbOption = None,
    json_output: JsonOption = False,
    campaign: Annotated[int | None, typer.Option("--campaign", help="Only this campaign.")] = None,
    status: Annotated[str | None, typer.Option("--status", help="Only attempts with this status.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Newest N attempts.")] = 50,
) -> None:
    """Attempts, newest first."""
    if status is not None and status not in ATTEMPT_STATUSES:
        raise RebenchError(f"invalid --status {status!r}; allowed: {', '.join(ATTEMPT_STATUSES)}")
    store = open_store(db, read_only=True)
    with store.session() as session:
        query = select(Attempt).where(Attempt.source == "own").order_by(Attempt.id.desc()).limit(limit)
        if campaign is not None:
            query = query.where(Attempt.campaign_id == campaign)
        if status is not None:
            query = query.where(Attempt.status == status)
        attempts = list(session.scalars(query))
        humans = {h.attempt_id: h for h in session.scalars(
            select(HumanSession).where(HumanSession.attempt_id.in_([a.id for a in attempts])))}
        rows = [{**_attempt_row(a), **_human_fields(session, a, humans.get(a.id))} for a in attempts]
    if json_output:
        print_json(rows)
        return
    names = LIST_COLUMNS + (("expert",) if humans else ())
    columns = [Col(c, key=c in KEY_COLUMNS) for c in names]
    cells = [[_working_cell(row) if c == "working_s" else _cell(row.get(c)) for c in names] for row in rows]
    print_table(console, "Attempts", columns, cells, more="--json", drop_first=("expert", *DROP_FIRST))


def _working_cell(row: dict[str, Any]) -> str:
    """Working seconds as recorded, and corrected beside them where a correction changed them."""
    corrected = row.get("corrected_working_s")
    if corrected is None or not row.get("corrections"):
        return _cell(row["working_s"])
    return f"{fmt(row['working_s'], 1)} (corrected {fmt(corrected, 1)})"


@app.command("show")
def show_command(attempt_id: int, db: DbOption = None, json_output: JsonOption = False) -> None:
    """One attempt: its row, score log, pauses and every event."""
    store = open_store(db, read_only=True)
    with store.session() as session:
        attempt = session.get(Attempt, attempt_id)
        if attempt is None:
            raise RebenchError(f"no attempt with id {attempt_id}")
        detail = {
            **_attempt_row(attempt),
            "env_version": attempt.env_version, "seed": attempt.seed, "backend": attempt.backend,
            "source": attempt.source,
            "error_message": attempt.error_message, "limit_reason": attempt.limit_reason,
            "wall_s": attempt.wall_s, "model_wait_s": attempt.model_wait_s,
            "input_tokens": attempt.input_tokens, "output_tokens": attempt.output_tokens,
            "cached_tokens": attempt.cached_tokens, "cost_usd": attempt.cost_usd,
            "anchors_kind": attempt.anchors_kind, "snapshot_path": attempt.snapshot_path,
            "retry_of": attempt.retry_of, "counted": attempt.counted,
            "scores": [
                {"kind": s.kind, "working_s": round(s.working_s, 2), "raw": s.raw, "valid": s.valid,
                 "message": s.message, "duration_s": round(s.duration_s, 2)}
                for s in session.scalars(select(ScoreEvent).where(ScoreEvent.attempt_id == attempt_id)
                                         .order_by(ScoreEvent.id))
            ],
            "pauses": [
                {"reason": p.reason, "start_s": p.start_s, "end_s": p.end_s}
                for p in session.scalars(select(Pause).where(Pause.attempt_id == attempt_id).order_by(Pause.id))
            ],
            "events": [
                {"seq": e.seq, "kind": e.kind, "working_s": round(e.working_s, 2),
                 "duration_s": round(e.duration_s, 3), "data": e.data}
                for e in session.scalars(select(Event).where(Event.attempt_id == attempt_id).order_by(Event.seq))
            ],
        }
        detail["gateway"] = {meter: usage.model_dump() for meter, usage in
                             gateway_usage(session, [attempt_id]).get(attempt_id, {}).items()}
        human = session.get(HumanSession, attempt_id)
        if human is not None:
            detail.update(_human_detail(session, attempt, human))
        detail["window_anchors"] = _window_detail(attempt, session)
        from rebench.report.rescored import attempt_rescores

        detail["rescores"] = attempt_rescores(session, attempt_id)
        from rebench.report.heldout import attempt_detail

        detail["probing"] = attempt_detail(store, attempt, list(session.scalars(
            select(ScoreEvent).where(ScoreEvent.attempt_id == attempt_id).order_by(ScoreEvent.id))))
    detail["rescore_failed"] = sum(1 for s in detail["scores"] if s["kind"] == "rescore" and not s["valid"])
    snapshots = [e["data"] for e in detail["events"] if e["kind"] == "snapshot"
                 and e["data"].get("score_id") is None]
    detail["snapshot_note"] = snapshots[-1].get("note") if snapshots else None
    tree = tree_from_events(attempt_id, detail["agent"], detail["environment"],
                            ((e["kind"], e["data"], e["working_s"]) for e in detail["events"]))
    if tree.nodes:
        detail["solution_tree"] = tree.as_json()
    if json_output:
        print_json(detail)
        return
    console.print(Text.assemble(
        (f"attempt {attempt_id}", "bold"),
        literal(f": {detail['environment']} ({detail['profile']}) by {detail['agent']}"
        f"{' / ' + detail['model'] if detail['model'] else ''}, budget {detail['budget']}\n"
        f"status {detail['status']}"
        f"{' (' + detail['error_source'] + ')' if detail['error_source'] else ''}"
        f"{' limit: ' + detail['limit_reason'] if detail['limit_reason'] else ''}"
        f"{' - ' + detail['error_message'] if detail['error_message'] else ''}\n"
        f"final raw {fmt(detail['final_raw'], 4)}, normalized {fmt(detail['normalized'])} "
        f"({detail['anchors_kind']} anchors){_rule_note(detail)}; "
        f"working {detail['working_s']:.1f} s of wall {detail['wall_s']:.1f} s"),
    ))
    console.print(literal_text(network_line(detail["network"], detail["backend"], detail["source"])))
    console.print(literal_text(provenance_line(detail)))
    if detail["window_anchors"] is not None:
        console.print(literal_text(_window_line(detail["window_anchors"])))
    from rebench.report.rescored import rescore_lines

    for line in rescore_lines(detail["rescores"], detail["final_raw"], detail["normalized"]):
        console.print(literal_text(line))
    from rebench.report.heldout import attempt_line

    probing = attempt_line(detail["probing"])
    if probing:
        console.print(literal_text(probing))
    for meter, usage in detail["gateway"].items():
        console.print(literal_text(f"gateway ({meter}): {MeterUsage(**usage).line()}"))
    if "expert" in detail:
        _print_human(detail)
    if detail["snapshot_path"] or detail["snapshot_note"]:
        console.print(literal_text(f"snapshot {detail['snapshot_path'] or '(none)'}"))
    if detail["snapshot_note"]:
        console.print(literal_text(detail["snapshot_note"], "yellow"))
    scores = Table(title="Score log")
    for column in ("kind", "working s", "raw", "valid", "message"):
        scores.add_column(column)
    for s in detail["scores"]:
        scores.add_row(s["kind"], f"{s['working_s']:.1f}", fmt(s["raw"], 4), str(s["valid"]), str(s["message"]))
    console.print(scores)
    if detail["pauses"]:
        pauses = Table(title="Pauses (the clock stopped; not working time)")
        for column in ("reason", "from s", "to s", "length s"):
            pauses.add_column(column)
        for pause in detail["pauses"]:
            end = pause["end_s"]
            pauses.add_row(str(pause["reason"]), f"{pause['start_s']:.1f}", "open" if end is None else f"{end:.1f}",
                           "-" if end is None else f"{end - pause['start_s']:.1f}")
        console.print(pauses)
    if tree.nodes:
        console.print(literal_text(f"Solution tree ({len(tree.nodes)} nodes; best node restored: "
                           f"{tree.best if tree.best is not None else 'none'})"))
        for line in tree_lines(tree):
            console.print(literal_text(line), soft_wrap=True)
    events = Table(title="Events")
    for column in ("#", "working s", "kind", "data"):
        events.add_column(column)
    for e in detail["events"]:
        text = _model_call_text(e["data"]) if e["kind"] == "model_call" else str(e["data"])
        events.add_row(str(e["seq"]), f"{e['working_s']:.1f}", e["kind"], text if len(text) < 300 else text[:300] + "…")
    console.print(events)


def _model_call_text(data: dict[str, Any]) -> str:
    """A model call as one line: tokens, the reply's text and its tool calls (name and arguments)."""
    calls = "; ".join(f"{c.get('name')}({json.dumps(c.get('arguments'), default=str)[:160]})"
                      for c in data.get("tool_calls") or [])
    said = str(data.get("text") or "").strip().replace("\n", " ")[:160]
    return (f"{data.get('input_tokens', 0)} in / {data.get('output_tokens', 0)} out tokens, "
            f"{data.get('wait_s', 0):.2f} s" + (f"; said: {said}" if said else "")
            + (f"; tool calls: {calls}" if calls else ""))


def _human_detail(session: Session, attempt: Attempt, human: HumanSession) -> dict[str, Any]:
    """`attempts show` of a human attempt: the expert, how they connected, the pause corrections
    (who, why) and the SSH sessions with where each recording is stored."""
    from rebench.human.audit import clock_rows, ssh_sessions

    _, corrections = clock_rows(session, attempt.id)
    return {
        **_human_fields(session, attempt, human),
        "human": {"state": human.state, "key_fingerprint": human.key_fingerprint, "bind": human.bind,
                  "port": human.port, "container_id": human.container_id, "gate_dir": human.gate_dir,
                  "clock_origin": human.clock_origin, "stop_requested": human.stop_requested},
        "pause_corrections": [
            {"id": c.id, "start_s": c.start_s, "end_s": c.end_s, "reason": c.reason, "author": c.author,
             "created_at": c.created_at}
            for c in corrections
        ],
        "recordings": ssh_sessions(session, attempt.id, human.gate_dir),
    }


def _print_human(detail: dict[str, Any]) -> None:
    human = detail["human"]
    console.print(literal_text(f"expert {detail['expert']} (key {human['key_fingerprint'] or '-'}, state {human['state']})"))
    console.print(literal_text(f"working {detail['working_s']:.1f} s as recorded, {detail['corrected_working_s']:.1f} s "
                       f"corrected ({detail['corrections']} pause correction(s))"))
    if detail["pause_corrections"]:
        corrections = Table(title="Pause corrections (rebench human adjust)")
        for column in ("#", "start", "end", "length", "author", "reason", "added"):
            corrections.add_column(column)
        for c in detail["pause_corrections"]:
            corrections.add_row(str(c["id"]), format_duration(c["start_s"]), format_duration(c["end_s"]),
                                format_duration(c["end_s"] - c["start_s"]), literal_text(c["author"]), literal_text(c["reason"]),
                                f"{c['created_at']:%Y-%m-%d %H:%M}")
        console.print(corrections)
    from rebench.human.audit import session_lines

    console.print("SSH sessions and their recordings (play one: rebench human replay ID --session N):"
                  if detail["recordings"] else "no SSH sessions", highlight=False)
    for line in session_lines(detail["recordings"]):
        console.print(literal_text("  " + line), soft_wrap=True)
