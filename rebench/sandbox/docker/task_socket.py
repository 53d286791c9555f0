"""The `task` command inside a container (score, submit, the clock): the exec server passes each
request up the channel and the harness's handler answers it (rebench.sandbox.docker.tasks)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from rebench.errors import SandboxError
from rebench.sandbox.docker.file_ops import ContainerFileOps
from rebench.sandbox.docker.tasks import NO_HARNESS_EXIT, TaskHandler, TaskReply, TaskRequest, attach_hint

_TASK_CLIENT_SOURCE = (Path(__file__).parents[1] / "human" / "task.py").read_bytes()
TASK_CLIENT = "/usr/local/bin/task"


class TaskSocket(ContainerFileOps):
    """The task half of DockerSandbox."""

    task_handler: TaskHandler | None
    _task_jobs: set[asyncio.Task[None]]

    async def serve_task(self, handler: TaskHandler) -> None:
        """Answer the `task` command with `handler` in a plain (not keep-alive) attempt: the exec
        server opens the root-owned task socket, as it does for a human attempt, and the client
        goes to /usr/local/bin/task (an agent installed in the sandbox scores from its shell)."""
        if self._channel is None:
            raise SandboxError(f"attempt {self.spec.attempt_id}: the sandbox is not started")
        self.task_handler = handler
        await self.write_file(TASK_CLIENT, _TASK_CLIENT_SOURCE, user="root", mode=0o755)
        reply = await self._channel.request({"op": "task_listen"})
        if not reply.get("ok"):
            raise SandboxError(f"attempt {self.spec.attempt_id}: the task socket did not open: {reply}")

    def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("event") != "task":
            return
        job = asyncio.get_running_loop().create_task(self._answer_task(message))
        self._task_jobs.add(job)
        job.add_done_callback(self._task_jobs.discard)

    async def _answer_task(self, message: dict[str, Any]) -> None:
        channel = self._channel
        try:
            request = TaskRequest(
                command=str(message.get("command", "")),
                args=[str(a) for a in message.get("args") or []],
                uid=int(message.get("uid", -1)),
                pid=int(message.get("pid", 0)),
            )
            if self.task_handler is None:
                reply = TaskReply(exit_code=NO_HARNESS_EXIT,
                                  output=attach_hint(self.spec.attempt_id, "nothing answers task commands now"))
            else:
                reply = await self.task_handler(request)
        except Exception as exc:  # the expert gets a message, the channel lives on
            reply = TaskReply(exit_code=1, output=f"task: the harness failed: {type(exc).__name__}: {exc}\n")
        if channel is not None and channel.is_open:
            with contextlib.suppress(SandboxError, TimeoutError):
                async with asyncio.timeout(30):
                    await channel.request(
                        {"op": "task_reply", "task": message.get("task"), "exit_code": reply.exit_code,
                         "output": reply.output}
                    )
