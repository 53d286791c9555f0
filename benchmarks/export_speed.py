"""Time and memory of `rebench export inspect` and `rebench export atif` for 1, 10 and 50 campaigns'
worth of generated events.

Each generated campaign is one environment and one modular-like agent with two attempts of
`--turns` turns each: a model call whose request is stored as the agent stores it
(rebench.models.requests, so every request resends the growing conversation), a bash
command, its tool result, a score every 10 turns and two pauses. Rows go into a real SQLite
file through the event schema (validate_event). Each export runs in a fresh process, so its
peak RSS is its own; beside it, the baseline: the same process only reading every row of
those attempts (what any export must at least do). Export time should grow linearly with the
number of campaigns, and peak memory should stay flat (Inspect logs are built one at a time; ATIF
trajectories stream to their file step by step). Each size prints an `inspect` and an `atif` line for
the same database.

    python -m benchmarks.export_speed [--sizes 1,10,50] [--turns 40]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import insert

from rebench.models import Message, ToolCall, ToolSpec
from rebench.models.requests import RequestLog
from rebench.store import Attempt, Campaign, Event, Pause, ScoreEvent, Store
from rebench.store.events import validate_event

TOOLS = [ToolSpec(name=n, description=f"The {n} tool.", parameters={"type": "object", "properties": {}})
         for n in ("bash", "python", "score", "submit")]


def _attempt_rows(attempt_id: int, turns: int, began: datetime) -> tuple[list[dict], list[ScoreEvent], list[Pause]]:
    log = RequestLog()
    messages = [Message(role="user", content="Make the kernel fast. " * 40)]
    events: list[dict] = []
    scores: list[ScoreEvent] = []
    seq = 0

    def add(kind: str, working_s: float, **data: object) -> None:
        nonlocal seq
        seq += 1
        events.append({"attempt_id": attempt_id, "seq": seq, "kind": kind, "working_s": working_s,
                       "duration_s": 0.1, "created_at": began + timedelta(seconds=working_s),
                       "data": validate_event(kind, data)})

    add("start", 0.0, instructions=messages[0].content, agent="modular", model="openai/scripted", budget_s=3600.0,
        backend="local")
    for turn in range(1, turns + 1):
        at = turn * 10.0
        call = ToolCall(id=f"call-{turn}", name="bash", arguments={"command": f"python bench.py --step {turn}"})
        request = log.record("You are an agent. " * 30, messages, TOOLS, max_output_tokens=4096)
        add("model_call", at, model="openai/scripted", input_tokens=1000 * turn, output_tokens=200, cached_tokens=0,
            cost_usd=0.01, wait_s=2.0, text=f"Step {turn}: trying a change.", tool_calls=[call.model_dump()],
            turn=turn, request=request)
        output = f"exit code: 0\nstdout:\n{'timing line ' * 120}\n"
        add("bash", at + 1, command=call.arguments["command"], timeout=None, exit_code=0, timed_out=False,
            stdout=output, stderr="")
        add("tool_result", at + 2, turn=turn, tool="bash", call_id=call.id, arguments=call.arguments, output=output)
        messages += [Message(role="assistant", content=f"Step {turn}: trying a change.", tool_calls=[call]),
                     Message(role="tool", tool_call_id=call.id, tool_name="bash", content=output),
                     Message(role="user", content=f"[Time: {turn} of {turns} turns used]")]
        if turn % 10 == 0:
            scores.append(ScoreEvent(attempt_id=attempt_id, kind="intermediate", working_s=at + 3, raw=5.0 - turn / 100,
                                     valid=True, message={"time_ms": 100}, details={}, duration_s=3.0,
                                     created_at=began + timedelta(seconds=at + 3)))
            add("score", at + 4, feedback={"score": 5.0 - turn / 100, "valid": True})
    add("submit", turns * 10.0 + 5, answer=None)
    pauses = [Pause(attempt_id=attempt_id, reason="setup", start_s=0.0, end_s=5.0),
              Pause(attempt_id=attempt_id, reason="provider-retry", start_s=100.0, end_s=104.0)]
    return events, scores, pauses


def generate(db: Path, campaigns: int, turns: int) -> int:
    """A database with `campaigns` campaigns of two attempts each; returns the number of event rows."""
    store = Store(db)
    began = datetime(2025, 1, 1, tzinfo=UTC)
    total = 0
    for index in range(campaigns):
        with store.session() as session:
            campaign = Campaign(spec={"generated": True})
            session.add(campaign)
            session.flush()
            for _ in range(2):
                attempt = Attempt(campaign_id=campaign.id, environment="triton_cumsum", profile="tiny",
                                  agent="modular", model="openai/scripted", budget_s=3600.0, status="done",
                                  started_at=began, ended_at=began + timedelta(hours=1), working_s=turns * 10.0,
                                  wall_s=turns * 10.0 + 9, final_raw=4.6, final_rule="best", submitted=True)
                session.add(attempt)
                session.flush()
                events, scores, pauses = _attempt_rows(attempt.id, turns, began + timedelta(days=index))
                session.execute(insert(Event), events)
                session.add_all([*scores, *pauses])
                total += len(events)
    store.close()
    return total


def child(db: Path, out: Path, mode: str) -> None:
    """One measurement in this process: the export, or only reading the rows (the baseline)."""
    from sqlalchemy import select

    store = Store(db)
    if mode == "inspect":  # imported before the clock starts: a fixed cost, not the export's
        import inspect_ai.log  # noqa: F401

        import rebench.export.inspect_events  # noqa: F401
        from rebench.export.inspect_log import export_inspect
    elif mode == "atif":
        from rebench.export.atif import export_atif
        from rebench.export.gateway_calls import GatewayCalls  # noqa: F401  (Inspect, for gateway calls)
    began = time.perf_counter()
    if mode == "inspect":
        export_inspect(store, out)
    elif mode == "atif":
        export_atif(store, out)
    else:
        with store.session() as session:
            for attempt_id in session.scalars(select(Attempt.id)):
                for _ in session.scalars(select(Event).where(Event.attempt_id == attempt_id).order_by(Event.seq)
                                         .execution_options(yield_per=500)):
                    pass
    seconds = time.perf_counter() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mb": peak_mb}))


def measure(db: Path, out: Path, mode: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.export_speed", "--child", mode, str(db), str(out)],
                          capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,10,50")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "DB", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[1]), Path(args.child[2]), args.child[0])
        return
    print(f"{'format':>7} {'campaigns':>9} {'events':>7} {'export s':>9} {'ms/1k ev':>9} {'peak MB':>8} "
          f"{'kB on disk':>10} | {'read-only s':>11} {'peak MB':>8}")
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="rebench-export-speed-") as scratch:
            db = Path(scratch) / "r.db"
            events = generate(db, size, args.turns)
            baseline = measure(db, Path(scratch) / "none", "read")
            for mode, pattern in (("inspect", "*.eval"), ("atif", "*/trajectory.json")):
                out = Path(scratch) / mode
                exported = measure(db, out, mode)
                written = sum(p.stat().st_size for p in out.glob(pattern)) / 1024
                per_thousand_ms = 1e6 * exported["seconds"] / events
                print(f"{mode:>7} {size:>9} {events:>7} {exported['seconds']:>9.2f} {per_thousand_ms:>9.0f} "
                      f"{exported['peak_mb']:>8.0f} {written:>10.0f} | {baseline['seconds']:>11.2f} "
                      f"{baseline['peak_mb']:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
