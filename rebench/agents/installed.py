"""Running a declared agent (rebench.agents.declared) inside the attempt's Docker sandbox.

Before the sandbox starts, the agent's image layer is built on the environment's image (cached by
content) and its gateway's socket folder is made (rebench.gateway.agent_meter). During the attempt the
agent's command runs as the agent's uid in the solution folder, with the instructions in a file, the
gateway's address and a per-attempt token in its environment, and nothing else of the harness: it
scores and submits with the `task` command, as a human expert does (the same socket, visibility rules,
freezing and score events). It ends when it exits (without `task submit`: unsubmitted), when it
submits, or when the budget, a token or a cost limit stops it (its command is killed with the attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from rebench.agents.base import AgentConfig, AgentContext
from rebench.agents.declared import AgentDeclaration
from rebench.agents.task_door import TaskDoor
from rebench.errors import RebenchError
from rebench.gateway.agent_meter import AGENT_GATEWAY_PORT, AgentGateway, agent_gateway_config
from rebench.sandbox.base import SandboxSpec

INSTRUCTIONS_FILE = ".rebench/instructions.md"
"""The `task` commands an installed agent may run (a human's start/pause/resume move the clock)."""
TASK_NOTE = """
## Scoring and submitting

You work in a shell inside the task's sandbox. Use the `task` command:

- `task score` scores the solution as it is now (this counts as working time);
- `task score-log` lists your scores so far;
- `task submit` ends the attempt with your solution as it is. If you stop without it, the attempt
  ends unsubmitted.
"""
OUTPUT_TAIL = 20_000


def _fill(text: str, values: dict[str, str]) -> str:
    try:
        return text.format_map(values)
    except (KeyError, ValueError, IndexError) as exc:
        raise RebenchError(f"agent declaration: cannot fill {text[:60]!r}: unknown or bad placeholder {exc}") from None


class InstalledAgent:
    """An agent that runs inside the sandbox from its declaration."""

    uses_reference = False

    def __init__(self, declaration: AgentDeclaration, config: AgentConfig) -> None:
        self.declaration = declaration
        self.config = config
        self.arguments = sorted(declaration.args)
        self.args = {**declaration.args, **config.args}
        self.gateway: AgentGateway | None = None

    def check(self, backend: str) -> None:
        """Before anything starts: the docker backend, and a model whose key the harness has."""
        if backend != "docker":
            raise RebenchError(f"agent {self.declaration.name!r} runs inside the sandbox: use --backend docker "
                               f"(got {backend!r})")
        try:
            agent_gateway_config(self.config, self.declaration.max_output_tokens)
        except ValueError as exc:
            raise RebenchError(f"agent {self.declaration.name!r}: {exc}") from None

    def prepare_sandbox(self, spec: SandboxSpec, env: Any, calls_dir: Path) -> SandboxSpec:
        """Build (or find) the agent's image on the environment's and open its gateway's folder (blocking)."""
        from rebench.images.agent_layer import build_agent_image
        from rebench.images.build import current_environment_image
        from rebench.sandbox.docker import DockerEngine

        engine = DockerEngine.connect()
        base = spec.image or current_environment_image(env, spec.profile, engine)
        image = build_agent_image(engine, base, self.declaration)
        self.gateway = AgentGateway(agent_gateway_config(self.config, self.declaration.max_output_tokens), calls_dir)
        return spec.model_copy(update={"image": image, "agent_gateway_socket": self.gateway.socket_path,
                                       "agent_gateway_port": AGENT_GATEWAY_PORT})

    async def run(self, ctx: AgentContext) -> None:
        if self.gateway is None:
            raise RebenchError(f"agent {self.declaration.name!r}: the sandbox was not prepared for it")
        sandbox: Any = ctx.sandbox  # type: ignore[attr-defined]  # AttemptContext's (the Docker sandbox)
        await self.gateway.start(ctx)
        try:
            await sandbox.serve_task(TaskDoor(ctx).handle)  # type: ignore[arg-type]  # an AttemptContext
            paths = ctx.paths
            values = {**self.args, "gateway_url": f"http://127.0.0.1:{AGENT_GATEWAY_PORT}",
                      "token": self.gateway.token, "model": self.gateway.gateway.model,
                      "instructions_file": paths.in_home(INSTRUCTIONS_FILE), "home": paths.home,
                      "solution": paths.solution}
            await sandbox.exec(["mkdir", "-p", paths.in_home(".rebench")], user="agent", timeout=30)
            await sandbox.write_file(values["instructions_file"], (ctx.instructions + TASK_NOTE).encode(),
                                     user="agent", mode=0o600)
            for relative, content in self.declaration.files.items():
                target = paths.in_home(relative)
                await sandbox.exec(["mkdir", "-p", str(Path(target).parent)], user="agent", timeout=30)
                await sandbox.write_file(target, _fill(content, values).encode(), user="agent", mode=0o600)
            env = {name: _fill(value, values) for name, value in self.declaration.env.items()}
            command = _fill(self.declaration.command, values)
            ctx.log_event("note", message=f"{self.declaration.name} started: {command}")
            run = asyncio.ensure_future(sandbox.exec(["bash", "-c", command], user="agent", env=env,
                                                     cwd=paths.solution, timeout=ctx.remaining_s() + 5))
            try:
                while not run.done():
                    await asyncio.wait({run}, timeout=0.2)
                    if self.gateway.limit is not None:
                        raise self.gateway.limit
            finally:
                if not run.done():  # the budget ended (the runner cancels us) or a limit: kill the agent's command
                    run.cancel()
                    with contextlib.suppress(BaseException):
                        await run
            result = run.result()
            ctx.log_event("note", message=f"{self.declaration.name} exited with status {result.exit_code}",
                          data={"exit_code": result.exit_code, "stdout_tail": result.stdout[-OUTPUT_TAIL:],
                                "stderr_tail": result.stderr[-OUTPUT_TAIL:]})
            if self.gateway.limit is not None:
                raise self.gateway.limit
        finally:
            await asyncio.shield(self.gateway.close())

    def release(self) -> None:
        """After the sandbox stopped: the gateway's host folder goes."""
        if self.gateway is not None:
            self.gateway.remove_folder()

    async def collect(self, sandbox: Any, dest: Path) -> list[str]:
        """Copy the agent's own session logs out of the sandbox (after it ended) into `dest`.

        The copy is root's (the engine's archive API), and the folders are the agent's: a folder on the
        way that the agent turned into a link would have root copy whatever it points to (the
        environment's scoring code, protected files) into the attempt's records. So the agent's
        processes are stopped first (nothing can change the path meanwhile) and a path is copied only
        when it resolves to itself, with no link anywhere on it."""
        from rebench.sandbox.snapshot import SnapshotBudget

        with contextlib.suppress(Exception):
            await sandbox.kill_agent_processes()
        copied = []
        for relative in self.declaration.session_logs:
            source = sandbox.paths.in_home(relative)
            resolved = await sandbox.exec(["realpath", "-e", "--", source], user="root", timeout=30)
            if not resolved.ok or resolved.stdout.strip() != source:
                continue  # missing, or a link on the way: not the agent's log folder
            target = dest / relative.replace("/", "_").lstrip("._")  # .claude/projects -> claude_projects
            with contextlib.suppress(Exception):
                await sandbox.copy_out(source, str(target), SnapshotBudget(256 * 1024**2, 10_000))
                if target.exists():
                    copied.append(str(target))
        return copied
