"""The `task` commands an attempt answers from inside its sandbox (the container's `task` client
relays them to the harness): `score`, `score-log`, `submit`, `status` and `note`.

An installed agent (Claude Code, Codex) and a human expert both work in a shell and call the same
commands, so both are answered here, by one class, with the same words; the expert's door
(rebench.human.tasks) adds the clock commands (`start`, `pause`, `resume`) on top. Every command,
refused or not, is recorded as a `task` event with its answer.

The door closes when the agent's time is over (its run ended, its budget ran out, it submitted:
AttemptContext.end_agent): a command still running then is cancelled and nothing it did is
recorded, and later ones are refused, so nothing the agent left behind (a background loop, a
score queued at the last moment) can score once the attempt is ending, as an agent calling
ctx.score in the harness's process could not either.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rebench.sandbox.docker.tasks import TaskReply, TaskRequest

AGENT_COMMANDS = ("score", "score-log", "submit", "status", "note")
TEXT_COMMANDS = ("submit", "note", "pause")
"""Commands whose arguments are text (an answer, a note, a reason); every other one takes none."""
SUBMIT_DELAY_S = 0.5
"""The attempt ends this long after `task submit` answers, so the answer reaches the caller first."""
USAGE = 2
REFUSED = 1


def duration_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


class TaskRecorder(Protocol):
    def event(self, kind: str, duration_s: float = 0.0, **data: Any) -> None: ...


class DoorContext(Protocol):
    """What the commands need of the attempt (rebench.context.AttemptContext has it all)."""

    budget_s: float
    answer: str | None
    submitted: asyncio.Event

    @property
    def recorder(self) -> TaskRecorder: ...

    def elapsed_s(self) -> float: ...

    async def score(self) -> dict[str, Any]: ...

    async def score_log(self) -> list[dict[str, Any]]: ...

    def score_feedback(self) -> list[dict[str, Any]]: ...

    def on_agent_end(self, callback: Callable[[], None]) -> None: ...


class TaskDoor:
    """One attempt's `task` commands for an agent working in its sandbox: the clock always runs."""

    commands: tuple[str, ...] = AGENT_COMMANDS
    caller = "agent"
    """Who a `task note` is recorded as written by."""

    def __init__(self, ctx: DoorContext) -> None:
        self.ctx = ctx
        self._lock = asyncio.Lock()
        self.submitted = False
        self.closed = False
        self._running: asyncio.Future[tuple[int, str]] | None = None
        ctx.on_agent_end(self.close)

    def close(self) -> None:
        """The agent's time is over: cancel the command running now and refuse the rest."""
        self.closed = True
        if self._running is not None:
            self._running.cancel()

    async def handle(self, request: TaskRequest) -> TaskReply:
        """The sandbox's task_handler (rebench.sandbox.docker.tasks)."""
        from rebench.sandbox.docker.tasks import TaskReply

        exit_code, output = await self.run(request.command, list(request.args))
        return TaskReply(exit_code=exit_code, output=output)

    async def run(self, command: str, args: list[str]) -> tuple[int, str]:
        """Answer one command (exit code, text for the caller) and record it as a `task` event."""
        async with self._lock:
            self._running = asyncio.ensure_future(self._dispatch(command, args))
            try:
                exit_code, output = await self._running
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not self.closed or (current is not None and current.cancelling()):
                    raise  # the caller itself was cancelled (the sandbox stops), not the command by close()
                exit_code, output = REFUSED, f"the attempt ended before `task {command}` finished; it does not count"
            except Exception as exc:  # the caller gets a line, the harness goes on
                exit_code, output = REFUSED, f"task {command} failed: {type(exc).__name__}: {exc}"
            finally:
                self._running = None
        output = output if output.endswith("\n") else output + "\n"
        self.ctx.recorder.event("task", command=command, args=args, exit_code=exit_code, output=output)
        return exit_code, output

    async def _dispatch(self, command: str, args: list[str]) -> tuple[int, str]:
        if command not in self.commands:
            return USAGE, f"unknown task command {command!r}; allowed: {', '.join(self.commands)}"
        if self.submitted:
            return REFUSED, "the attempt is submitted and ending"
        if self.closed:
            return REFUSED, "the attempt has ended: its time is over, `task` commands are closed"
        if args and command not in TEXT_COMMANDS:
            return USAGE, f"`task {command}` takes no arguments (got {' '.join(args)[:200]!r})"
        refusal = self.refusal(command)
        if refusal is not None:
            return REFUSED, refusal
        handler = getattr(self, "_" + command.replace("-", "_"))
        result: tuple[int, str] = await handler(args)
        return result

    def refusal(self, command: str) -> str | None:
        """Why `command` cannot run now (None: it can). The agent's clock always runs."""
        return None

    def status_head(self) -> list[str]:
        """The lines `task status` starts with."""
        return [self.time_line()]

    async def before_submit(self) -> None:
        """What must close before the attempt ends (the expert's open break)."""

    def time_line(self) -> str:
        used, budget = self.ctx.elapsed_s(), self.ctx.budget_s
        return (f"working time used {duration_text(used)}, left {duration_text(budget - used)} "
                f"(budget {duration_text(budget)})")

    async def _status(self, args: list[str]) -> tuple[int, str]:
        log = self.ctx.score_feedback()
        lines = [*self.status_head(), f"scores: {len(log)}"]
        lines += [f"  {i}. {json.dumps(entry, sort_keys=True)}" for i, entry in enumerate(log, 1)]
        return 0, "\n".join(lines)

    async def _score(self, args: list[str]) -> tuple[int, str]:
        feedback = await self.ctx.score()
        return 0, json.dumps(feedback, sort_keys=True)

    async def _score_log(self, args: list[str]) -> tuple[int, str]:
        log = await self.ctx.score_log()
        if not log:
            return 0, "no scores yet"
        return 0, "\n".join(f"{i}. {json.dumps(entry, sort_keys=True)}" for i, entry in enumerate(log, 1))

    async def _submit(self, args: list[str]) -> tuple[int, str]:
        await self.before_submit()
        self.submitted = True
        self.ctx.answer = " ".join(args) or None
        self.ctx.recorder.event("submit", answer=self.ctx.answer)
        asyncio.get_running_loop().call_later(SUBMIT_DELAY_S, self.ctx.submitted.set)
        return 0, f"submitted; the attempt ends now and your solution gets its final score. {self.time_line()}"

    async def _note(self, args: list[str]) -> tuple[int, str]:
        text = " ".join(args).strip()
        if not text:
            return USAGE, "nothing to note: `task note TEXT`"
        self.ctx.recorder.event("note", message=text, data={"by": self.caller})
        return 0, "noted"
