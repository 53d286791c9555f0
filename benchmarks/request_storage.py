"""Bytes stored for the requests of a long attempt: each request as a difference from the one before
(what the model_call events store, rebench.models.requests) against each request stored whole.

A modular-agent-shaped conversation: every turn the model calls one tool, the tool's output
(`--output-chars`, cut as the agent cuts it) and a time note go back; once the conversation is
estimated past the context window, the agent's own trimming (rebench.agents.modular.history)
replaces the oldest outputs with a notice, as in a real attempt. Printed for 50, 100 and 200 calls:
the diff grows with what is new each call (linear); whole requests grow with the conversation
each call (quadratic until the window caps them, then linear with the window's size per call).

    python -m benchmarks.request_storage [--calls 50,100,200] [--output-chars 3000] [--window 200000]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rebench.agents.modular.history import estimate_tokens, trim_oldest
from rebench.agents.modular.settings import ModularSettings
from rebench.agents.modular.tools import tool_specs
from rebench.models import Message, ToolCall
from rebench.models.requests import RequestLog
from rebench.store.events import validate_event


def run(calls: int, output_chars: int, window: int) -> tuple[int, int, int]:
    """(bytes of the stored differences, bytes of the whole requests, calls that trimmed)."""
    settings = ModularSettings()
    tools = tool_specs(settings)
    system = "You are an autonomous agent doing a research engineering task. " * 40
    messages = [Message(role="user", content="The task: make the kernel fast. " * 60)]
    log = RequestLog()
    diff_bytes = whole_bytes = trimmed = 0
    budget = int(window * settings.context_fill) - settings.max_output_tokens
    for turn in range(1, calls + 1):
        if estimate_tokens(system, messages, tools, settings.chars_per_token) > budget:
            trimmed += bool(trim_oldest(system, messages, tools, budget_tokens=budget,
                                        chars_per_token=settings.chars_per_token))
        request = log.record(system, messages, tools, max_output_tokens=settings.max_output_tokens)
        stored = validate_event("model_call", {"model": "m", "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
                                               "cost_usd": 0.0, "wait_s": 0.0, "request": request})
        diff_bytes += len(json.dumps(stored["request"]))
        whole_bytes += len(json.dumps({"system": system, "messages": [m.model_dump(mode="json") for m in messages],
                                       "tools": [t.model_dump(mode="json") for t in tools]}))
        call = ToolCall(id=f"call_{turn}", name="bash", arguments={"command": f"python bench.py --variant {turn}"})
        output = (f"exit code: 0\nstdout:\n{f'variant {turn}: ' * (output_chars // 12)}")[:output_chars]
        messages += [Message(role="assistant", content=f"Trying variant {turn}.", tool_calls=[call]),
                     Message(role="tool", tool_call_id=call.id, tool_name="bash", content=output),
                     Message(role="user", content=f"[Time: {turn} minutes of 480 used]")]
    return diff_bytes, whole_bytes, trimmed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", default="50,100,200")
    parser.add_argument("--output-chars", type=int, default=3000)
    parser.add_argument("--window", type=int, default=200_000, help="context window in tokens")
    args = parser.parse_args()
    print(f"{'calls':>6} {'stored (diff)':>14} {'per call':>9} | {'whole requests':>15} {'per call':>9} "
          f"{'ratio':>6} {'trimming calls':>15}")
    for calls in (int(c) for c in args.calls.split(",")):
        diff, whole, trimmed = run(calls, args.output_chars, args.window)
        print(f"{calls:>6} {diff / 1e6:>11.2f} MB {diff / calls / 1e3:>6.1f} kB | {whole / 1e6:>12.2f} MB "
              f"{whole / calls / 1e3:>6.1f} kB {whole / diff:>6.1f} {trimmed:>15}")


if __name__ == "__main__":
    main()
