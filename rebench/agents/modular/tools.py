"""The modular agent's tools: schemas for the model, and running them through the context.

Outputs are shown to the model cut to head and tail; the output as captured is
saved to a file in the workspace so the model can grep it. The sandbox itself
keeps only the first and last 500 kB of each stream of a command, and the
tool's text says so when that happened.
"""

from __future__ import annotations

import json
from typing import Any

from rebench.agents.base import AgentContext
from rebench.agents.modular.settings import ModularSettings
from rebench.models import ToolCall, ToolSpec
from rebench.sandbox.base import ExecResult
from rebench.sandbox.output import OUTPUT_LIMIT_BYTES, head_and_tail

OUTPUT_DIR = "tool_outputs"
SUBMIT = "submit"


def tool_specs(settings: ModularSettings) -> list[ToolSpec]:
    timeout = {
        "type": "number",
        "description": f"seconds before the command is killed (default {settings.bash_timeout_s:g}, "
        f"at most {settings.bash_timeout_max_s:g})",
    }
    return [
        ToolSpec(
            name="bash",
            description=(
                "Run a bash command and return its exit code, stdout and stderr. The call returns when "
                "the command's shell exits. Background processes (`cmd &`) keep running after it, but "
                "what they print afterwards is not returned (and writing to the closed output can kill "
                "them): redirect their output to a file. On timeout the "
                "command and everything it started are killed, and you get what it printed until then."
            ),
            parameters={
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout_s": timeout},
                "required": ["command"],
            },
        ),
        ToolSpec(
            name="python",
            description=(
                "Run a Python program in a fresh process and return its output. Same rules as bash: "
                "on timeout it is killed and you get what it printed until then."
            ),
            parameters={
                "type": "object",
                "properties": {"code": {"type": "string"}, "timeout_s": timeout},
                "required": ["code"],
            },
        ),
        ToolSpec(
            name="score",
            description="Score the current solution (may take a while). Returns the scoring message.",
            parameters={"type": "object", "properties": {}},
        ),
        ToolSpec(
            name="score_log",
            description="List the results of your score calls so far.",
            parameters={"type": "object", "properties": {}},
        ),
        ToolSpec(
            name=SUBMIT,
            description="End the attempt. Your solution as it stands is scored.",
            parameters={
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "optional final answer or note"}},
            },
        ),
    ]


KEPT_NOTE = (
    "note: the command printed more than {limit} bytes on a stream; only the first and last {half} bytes "
    "of that stream were kept (the cut is marked), the rest is lost"
)


def format_exec(result: ExecResult, timeout_s: float | None = None) -> str:
    """Exit code (or the timeout), then whatever the command printed, also when it was killed."""
    if result.timed_out:
        limit = f" after {timeout_s:g} s" if timeout_s is not None else ""
        head = f"timed out{limit}: the command and everything it started were killed; output until then follows"
    else:
        head = f"exit code: {result.exit_code}"
    parts = [head]
    if result.truncated:
        parts.append(KEPT_NOTE.format(limit=OUTPUT_LIMIT_BYTES, half=OUTPUT_LIMIT_BYTES // 2))
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout}")
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr}")
    return "\n".join(parts)


class ToolRunner:
    """Runs one tool call through the context and returns the text shown to the model."""

    def __init__(self, ctx: AgentContext, settings: ModularSettings) -> None:
        self.ctx = ctx
        self.settings = settings
        self.names = [spec.name for spec in tool_specs(settings)]
        self._saved = 0

    async def run(self, call: ToolCall) -> str:
        if call.parse_error:
            return f"error: could not read the arguments of {call.name}: {call.parse_error}"
        if call.name not in self.names:
            return f"error: unknown tool {call.name!r}; available: {', '.join(self.names)}"
        args = call.arguments
        try:
            if call.name == "bash":
                timeout = self._timeout(args)
                result = await self.ctx.bash(self._str(args, "command"), timeout=timeout)
                return await self.shorten(format_exec(result, timeout))
            if call.name == "python":
                timeout = self._timeout(args)
                result = await self.ctx.python(self._str(args, "code"), timeout=timeout)
                return await self.shorten(format_exec(result, timeout))
        except ValueError as exc:
            return f"error: {exc}"
        if call.name == "score":
            return await self.shorten(json.dumps(await self.ctx.score(), default=str))
        if call.name == "score_log":
            return await self.shorten(json.dumps(await self.ctx.score_log(), default=str))
        answer = args.get("answer")
        await self.ctx.submit(answer if isinstance(answer, str) else None)
        return "submitted"

    def _str(self, args: dict[str, Any], key: str) -> str:
        value = args.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"argument {key!r} must be a non-empty string")
        return value

    def _timeout(self, args: dict[str, Any]) -> float:
        requested = args.get("timeout_s")
        if requested is None:
            requested = self.settings.bash_timeout_s
        if isinstance(requested, str):
            try:
                requested = float(requested)
            except ValueError:
                raise ValueError(f"timeout_s must be a number of seconds, got {requested!r}") from None
        if not isinstance(requested, int | float) or isinstance(requested, bool) or requested <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {requested!r}")
        return float(min(requested, self.settings.bash_timeout_max_s, max(1.0, self.ctx.remaining_s())))

    async def shorten(self, text: str) -> str:
        """Head and tail of a long output, plus where this tool result is saved in full."""
        limit = self.settings.output_limit_chars
        if len(text) <= limit:
            return text
        self._saved += 1
        path = self.ctx.paths.in_home(OUTPUT_DIR, f"output_{self._saved}.txt")
        try:
            await self.ctx.write_file(path, text)
            where = f"this tool result ({len(text)} characters, as captured) is saved in {path}"
        except OSError as exc:
            where = f"it could not be saved ({exc})"
        head, tail, dropped = head_and_tail(text, limit)
        return (
            f"{head}\n[... {dropped} characters omitted here, the first and last {len(head)} are "
            f"shown; {where} ...]\n{tail}"
        )
