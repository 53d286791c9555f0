"""The expert's `task` commands, served by the harness (the container's `task` client relays them).

`task start` starts the clock (it runs paused, reason "waiting", until then), `pause REASON` /
`resume` record breaks, `status` shows the working time and the score log, `score` is the
agents' intermediate scoring (ctx.score: same visibility rules, a score event, the expert's
processes frozen while it runs), `score-log`, `submit` ends the attempt, `note TEXT` keeps a
note. Each command, refused or not, is also recorded as a `task` event with its answer. The
commands an installed agent has too are answered by rebench.agents.task_door, with the same words.
"""

from __future__ import annotations

from collections.abc import Callable

from rebench.agents.task_door import REFUSED, USAGE, TaskDoor
from rebench.clock import PauseInterval
from rebench.context import AttemptContext
from rebench.human.clock import BREAK, WAITING
from rebench.store.models import HumanState

COMMANDS = ("start", "pause", "resume", "status", "score", "score-log", "submit", "note")
BEFORE_START = ("start", "status", "note")
__all__ = ["BEFORE_START", "COMMANDS", "REFUSED", "USAGE", "TaskCommands"]


class TaskCommands(TaskDoor):
    """One attempt's `task` commands. `open_pauses` are the pauses open at hand-over (a fresh attempt
    opens its "waiting" pause here; a resumed one passes those rebuilt from the database)."""

    commands = COMMANDS
    caller = "expert"

    def __init__(self, ctx: AttemptContext, *, set_state: Callable[[HumanState], None],
                 open_pauses: dict[str, tuple[PauseInterval, int]] | None = None) -> None:
        super().__init__(ctx)
        self.ctx: AttemptContext = ctx
        self.set_state = set_state
        self.pauses = dict(open_pauses) if open_pauses is not None else None
        if self.pauses is None:
            interval = ctx.clock.pause(WAITING)
            self.pauses = {WAITING: (interval, ctx.recorder.pause_started(interval))}
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

    def refusal(self, command: str) -> str | None:
        if not self.started and command not in BEFORE_START:
            return f"the clock has not started: run `task start` first (`task {command}` needs it)"
        if command == "score" and self.on_break:
            return "on a break: `task resume` first"
        return None

    def status_head(self) -> list[str]:
        lines = [f"state: {self.state.value}", self.time_line()]
        if not self.started:
            lines.append("the clock starts with `task start`")
        return lines

    async def before_submit(self) -> None:
        if self.on_break:
            await self._end_break()

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

    async def _start(self, args: list[str]) -> tuple[int, str]:
        if self.started:
            return REFUSED, f"the clock is already running; {self.time_line()}"
        self._close(WAITING)
        return 0, (f"clock started: {self.time_line()}. `task pause REASON` for a break, "
                   "`task score` to score your solution, `task submit` when done.")

    async def _pause(self, args: list[str]) -> tuple[int, str]:
        if self.on_break:
            return REFUSED, "already on a break; `task resume` ends it"
        if not " ".join(args).strip():
            return USAGE, "say why: `task pause REASON`"
        self.break_cpu = await self._cpu_seconds()
        self._open(BREAK)
        return 0, (f"break started, the clock is paused; `task resume` when you are back. {self.time_line()}. "
                   "What runs in the container meanwhile is measured and reported with the attempt.")

    async def _resume(self, args: list[str]) -> tuple[int, str]:
        if not self.on_break:
            return REFUSED, "not on a break"
        used = await self._end_break()
        spent = "" if used is None else f" The container used {used:.1f} CPU-seconds during the break."
        return 0, f"break ended, the clock runs. {self.time_line()}.{spent}"

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
