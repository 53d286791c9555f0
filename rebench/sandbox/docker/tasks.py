"""The `task` command of a human attempt, harness side: what a request from inside the
sandbox looks like and what the harness answers.

Inside the container `task CMD ARGS...` (/usr/local/bin/task, see
rebench/sandbox/human/task.py) connects to /run/rebench-task/task.sock, served by the
exec server as root; the server checks the caller's uid (SO_PEERCRED: only the agent
user), forwards the request over the exec channel, and writes the harness's reply
back. The client holds no secret: the harness alone decides what a command does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import BaseModel

NO_HARNESS_EXIT = 3
"""Exit status of `task` when no harness (or no handler) is there to answer."""


class TaskRequest(BaseModel):
    """One `task` invocation: its command word, its arguments, and who ran it (from the kernel)."""

    command: str
    args: list[str]
    uid: int
    pid: int


class TaskReply(BaseModel):
    """What the `task` client prints (`output`, as is) and exits with."""

    exit_code: int = 0
    output: str = ""


TaskHandler = Callable[[TaskRequest], Awaitable[TaskReply]]


def attach_hint(attempt_id: int | str, why: str) -> str:
    """The line `task` prints when nobody answers: what the operator must do."""
    return (f"task: {why}; the operator must run `rebench human attach {attempt_id}` "
            "and then you can run the command again\n")
