"""The expert's `task` commands, served by the harness (the container's `task` client relays them).

`task start` starts the clock (it runs paused, reason "waiting", until then), `pause REASON` /
`resume` record breaks, `status` shows the working time and the score log, `score` is the
agents' intermediate scoring (ctx.score: same visibility rules, a score event, the expert's
processes frozen while it runs), `score-log`, `submit` ends the attempt, `note TEXT` keeps a
note. Each command, refused or not, is also recorded as a `task` event with its answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rebench.clock import PauseInterval
from rebench.context import AttemptContext
from rebench.human.clock import BREAK, WAITING
from rebench.store.models import HumanState

if TYPE_CHECKING:
    from rebench.sandbox.docker.tasks import TaskReply, TaskRequest

COMMANDS = ("start", "pause", "resume", "status", "score", "score-log", "submit", "note")
BEFORE_START = ("start", "status", "note")
SUBMIT_DELAY_S = 0.5
"""The attempt ends this long after `task submit` answers, so the answer reaches the expert first."""
USAGE = 2
REFUSED = 1


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


class TaskCommands:
    """One attempt's `task` commands. `open_pauses` are the pauses open at hand-over (a fresh attempt
    opens its "waiting" pause here; a resumed one passes those rebuilt from the database)."""

    def __init__(self, ctx: AttemptContext, *, set_state: Callable[[HumanState], None],
                 open_pauses: dict[str, tuple[PauseInterval, int]] | None = None) -> None:
        self.ctx = ctx
        self.set_state = set_state
        self._lock = asyncio.Lock()
        self.pauses = dict(open_pauses) if open_pauses is not None else None
        if self.pauses is None:
            interval = ctx.clock.pause(WAITING)
            self.pauses = {WAITING: (interval, ctx.recorder.pause_started(interval))}
        self.submitted = False
        self.break_cpu: float | None = None
        """The container's CPU seconds when the current break began (None: not known)."""

    @property
    def started(self) -> bool:
        return WAITING not in (self.pauses or {})

    @property
    def on_break(self) -> bool:
        return BREAK in (self.pauses or {})

    @property
    def state(self) -> HumanState:
        if not self.started:
            return HumanState.WAITING
        return HumanState.ON_BREAK if self.on_break else HumanState.WORKING

    async def handle(self, request: TaskRequest) -> TaskReply:
        """The sandbox's task_handler (rebench.sandbox.docker.tasks)."""
        from rebench.sandbox.docker.tasks import TaskReply

        exit_code, output = await self.run(request.command, list(request.args))
        return TaskReply(exit_code=exit_code, output=output)

    async def run(self, command: str, args: list[str]) -> tuple[int, str]:
        """Answer one command (exit code, text for the expert) and record it as a `task` event."""
        async with self._lock:
            try:
                exit_code, output = await self._dispatch(command, args)
            except Exception as exc:  # the expert gets a line, the harness goes on
                exit_code, output = REFUSED, f"task {command} failed: {type(exc).__name__}: {exc}"
        output = output if output.endswith("\n") else output + "\n"
        self.ctx.recorder.event("task", command=command, args=args, exit_code=exit_code, output=output)
        return exit_code, output

    async def _dispatch(self, command: str, args: list[str]) -> tuple[int, str]:
        if command not in COMMANDS:
            return USAGE, f"unknown task command {command!r}; allowed: {', '.join(COMMANDS)}"
        if self.submitted:
            return REFUSED, "the attempt is submitted and ending"
        if not self.started and command not in BEFORE_START:
            return REFUSED, f"the clock has not started: run `task start` first (`task {command}` needs it)"
        handler = getattr(self, "_" + command.replace("-", "_"))
        result: tuple[int, str] = await handler(args)
        return result

    def _close(self, reason: str) -> None:
        assert self.pauses is not None
        interval, row = self.pauses.pop(reason)
        self.ctx.clock.resume(interval)
        self.ctx.recorder.pause_ended(row, interval)
        self.set_state(self.state)

    def _open(self, reason: str) -> None:
        assert self.pauses is not None
        interval = self.ctx.clock.pause(reason)
        self.pauses[reason] = (interval, self.ctx.recorder.pause_started(interval))
        self.set_state(self.state)

    def _time_line(self) -> str:
        used, budget = self.ctx.elapsed_s(), self.ctx.budget_s
        return f"working time used {_duration(used)}, left {_duration(budget - used)} (budget {_duration(budget)})"

    async def _start(self, args: list[str]) -> tuple[int, str]:
        if self.started:
            return REFUSED, f"the clock is already running; {self._time_line()}"
        self._close(WAITING)
        return 0, (f"clock started: {self._time_line()}. `task pause REASON` for a break, "
                   "`task score` to score your solution, `task submit` when done.")

    async def _pause(self, args: list[str]) -> tuple[int, str]:
        if self.on_break:
            return REFUSED, "already on a break; `task resume` ends it"
        if not " ".join(args).strip():
            return USAGE, "say why: `task pause REASON`"
        self.break_cpu = await self._cpu_seconds()
        self._open(BREAK)
        return 0, (f"break started, the clock is paused; `task resume` when you are back. {self._time_line()}. "
                   "What runs in the container meanwhile is measured and reported with the attempt.")

    async def _resume(self, args: list[str]) -> tuple[int, str]:
        if not self.on_break:
            return REFUSED, "not on a break"
        used = await self._end_break()
        spent = "" if used is None else f" The container used {used:.1f} CPU-seconds during the break."
        return 0, f"break ended, the clock runs. {self._time_line()}.{spent}"

    async def _cpu_seconds(self) -> float | None:
        measure = getattr(self.ctx.sandbox, "cpu_seconds", None)  # the Docker sandbox's engine accounting
        return await measure() if measure is not None else None

    async def _end_break(self) -> float | None:
        """Close the break and record what the container computed during it: a break stops the clock
        on the expert's word, so the compute it hid is kept for whoever checks the attempt."""
        began, self.break_cpu = self.break_cpu, None
        self._close(BREAK)
        now = await self._cpu_seconds() if began is not None else None
        if began is None or now is None:
            return None
        used = max(0.0, now - began)
        self.ctx.recorder.event("note", message=f"the container used {used:.1f} CPU-seconds during a break",
                                data={"break_cpu_s": round(used, 3)})
        return used

    async def _status(self, args: list[str]) -> tuple[int, str]:
        lines = [f"state: {self.state.value}", self._time_line()]
        if not self.started:
            lines.append("the clock starts with `task start`")
        log = self._log()
        lines.append(f"scores: {len(log)}")
        lines += [f"  {i}. {json.dumps(entry, sort_keys=True)}" for i, entry in enumerate(log, 1)]
        return 0, "\n".join(lines)

    async def _score(self, args: list[str]) -> tuple[int, str]:
        if self.on_break:
            return REFUSED, "on a break: `task resume` first"
        feedback = await self.ctx.score()
        return 0, json.dumps(feedback, sort_keys=True)

    def _log(self) -> list[dict[str, Any]]:
        return self.ctx.score_feedback()

    async def _score_log(self, args: list[str]) -> tuple[int, str]:
        log = await self.ctx.score_log()
        if not log:
            return 0, "no scores yet"
        return 0, "\n".join(f"{i}. {json.dumps(entry, sort_keys=True)}" for i, entry in enumerate(log, 1))

    async def _submit(self, args: list[str]) -> tuple[int, str]:
        if self.on_break:
            await self._end_break()
        self.submitted = True
        self.ctx.answer = " ".join(args) or None
        self.ctx.recorder.event("submit", answer=self.ctx.answer)
        asyncio.get_running_loop().call_later(SUBMIT_DELAY_S, self.ctx.submitted.set)
        return 0, f"submitted; the attempt ends now and your solution gets its final score. {self._time_line()}"

    async def _note(self, args: list[str]) -> tuple[int, str]:
        text = " ".join(args).strip()
        if not text:
            return USAGE, "nothing to note: `task note TEXT`"
        self.ctx.recorder.event("note", message=text, data={"by": "expert"})
        return 0, "noted"
