"""An installed agent's gateway call, as the ATIF export needs it: what was new in its request (the
tool results and user messages since the agent's last reply, the system prompt), the tools offered,
and the answer's reasoning and full text.

The request and the answer are read from the gateway's body file and converted by the Inspect
export's reader (rebench.export.gateway_calls, Inspect's own converters for the three APIs), so both
exports read installed agents alike. Without Inspect installed the call keeps what its `model_call`
event holds (text, tool calls, tokens) and a note says what is missing; nothing fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rebench.export.body_files import BodyFiles

WITHOUT_INSPECT = ("Inspect AI is not installed (pip install 'rebench[inspect]'): the request (tool results, "
                   "user messages, system prompt, tools) and the answer's reasoning are not rebuilt")


@dataclass
class GatewayTurn:
    """One call's request and answer, reduced to what ATIF steps hold."""

    system: str | None = None
    users: list[str] = field(default_factory=list)
    """User messages sent since the agent's last reply (in order)."""
    results: list[tuple[str, str]] = field(default_factory=list)
    """Tool results sent since the agent's last reply: (tool call id, content)."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The tools offered, in OpenAI's function-calling shape (ATIF's `tool_definitions`)."""
    text: str | None = None
    reasoning: str | None = None
    notes: list[str] = field(default_factory=list)


def _function(tool: Any) -> dict[str, Any]:
    parameters = tool.parameters.model_dump(mode="json", exclude_none=True) if tool.parameters else {}
    return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": parameters}}


class GatewayTurns:
    """Reads an attempt's gateway calls in call order (the converter shares unchanged messages)."""

    def __init__(self, files: BodyFiles | None) -> None:
        try:
            from rebench.export.gateway_calls import GatewayCalls
        except ImportError:
            self._calls: Any = None
        else:
            self._calls = GatewayCalls(files)

    def read(self, extra: dict[str, Any], model: str) -> GatewayTurn:
        if self._calls is None:
            return GatewayTurn(notes=[WITHOUT_INSPECT])
        from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser

        call = self._calls.rebuild(extra, model)
        turn = GatewayTurn(tools=[_function(tool) for tool in call.tools], notes=list(call.notes))
        messages = list(call.input)
        if messages and isinstance(messages[0], ChatMessageSystem):
            turn.system = messages[0].text
        last_reply = max((i for i, m in enumerate(messages) if isinstance(m, ChatMessageAssistant)), default=-1)
        for message in messages[last_reply + 1:]:
            if isinstance(message, ChatMessageTool):
                turn.results.append((message.tool_call_id or "", message.text))
            elif isinstance(message, ChatMessageUser):
                turn.users.append(message.text)
        if call.output is not None:
            reply = call.output.message
            turn.text = reply.text
            if isinstance(reply.content, list):
                thoughts = [part.reasoning for part in reply.content
                            if part.type == "reasoning" and not part.redacted and part.reasoning]
                turn.reasoning = "\n\n".join(thoughts) or None
        return turn
