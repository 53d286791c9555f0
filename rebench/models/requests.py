"""What each model call sent, stored as the difference from the call before it.

A conversation resends everything said so far on every call, so storing each request
whole grows quadratically with the attempt. `RequestLog` (one per model caller) turns each
request into a `ModelRequest` payload (rebench.store.events) that keeps the previous
request's messages and adds the new ones; old messages the agent rewrote since (a tool
output trimmed to a notice) are stored again, one by one. `RequestReader` rebuilds the
full requests from those payloads in call order, holding only the latest one. Each message is
turned into JSON once for the attempt (rebench.models.message_memo), so a call's record costs
the new messages, not the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import is_
from typing import Any

from pydantic import BaseModel, ConfigDict

from rebench.models.message_memo import MessageMemo
from rebench.models.messages import Message, ToolSpec
from rebench.store.events import ModelRequest, SentMessage, SentTool


def _message(_before: Message | None, message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_defaults=True)


def _shared_length(before: Sequence[dict[str, Any]], now: Sequence[dict[str, Any]]) -> int:
    """How many leading positions the two requests share: up to the last position that is
    equal in both (earlier positions may differ and are stored as replacements)."""
    for length in range(min(len(before), len(now)), 0, -1):
        if before[length - 1] == now[length - 1]:
            return length
    return 0


class RequestLog:
    """Turns one caller's successive requests into `request` fields of model_call events."""

    def __init__(self) -> None:
        self.calls = 0
        self._system: str | None = None
        self._tools: list[dict[str, Any]] | None = None
        self._messages: list[dict[str, Any]] = []
        self._sent: MessageMemo[dict[str, Any]] = MessageMemo(_message)

    def record(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
               max_output_tokens: int) -> dict[str, Any]:
        """The JSON of this request as a difference from the last one recorded; call it only for
        a call that is recorded (a failed call's request is not the base of the next)."""
        sent = self._sent.values(messages)
        offered = [t.model_dump(mode="json") for t in tools]
        first = self.calls == 0
        keep = 0 if first else _shared_length(self._messages, sent)
        request: dict[str, Any] = {"call": self.calls + 1, "max_output_tokens": max_output_tokens}
        if not first:
            request["extends"] = self.calls
        if keep:
            request["keep"] = keep
            replaced = []
            if not all(map(is_, sent[:keep], self._messages[:keep])):  # reused JSON is the same object
                replaced = [{"index": i, "message": sent[i]} for i in range(keep) if sent[i] != self._messages[i]]
            if replaced:
                request["replaced"] = replaced
        if first or system != self._system:
            request["system"] = system
        if first or offered != self._tools:
            request["tools"] = offered
        request["messages"] = sent[keep:]
        self.calls += 1
        self._system, self._tools, self._messages = system, offered, sent
        return request


class FullRequest(BaseModel):
    """One model call's request as it was sent."""

    model_config = ConfigDict(frozen=True)

    call: int
    system: str
    messages: list[SentMessage]
    tools: list[SentTool]
    max_output_tokens: int


class RequestChainError(ValueError):
    """A request extends a call that was not read just before it (a row lost or out of order)."""


class RequestReader:
    """Rebuilds full requests from an attempt's `ModelRequest`s, read in call order."""

    def __init__(self) -> None:
        self._last: FullRequest | None = None

    def read(self, request: ModelRequest) -> FullRequest:
        base = self._last if request.extends is not None else None
        if request.extends is not None and (base is None or base.call != request.extends):
            have = "none" if self._last is None else str(self._last.call)
            raise RequestChainError(f"request of call {request.call} extends call {request.extends}; last read: {have}")
        kept = list(base.messages[:request.keep]) if base is not None else []
        if len(kept) < request.keep:
            raise RequestChainError(f"request of call {request.call} keeps {request.keep} messages of "
                                    f"{len(kept)}")
        for swap in request.replaced:
            if swap.index >= len(kept):
                raise RequestChainError(f"request of call {request.call} replaces message {swap.index} of "
                                        f"{len(kept)} kept")
            kept[swap.index] = swap.message
        system = request.system if request.system is not None else (base.system if base is not None else "")
        tools = request.tools if request.tools is not None else (list(base.tools) if base is not None else [])
        self._last = FullRequest(call=request.call, system=system, messages=[*kept, *request.messages],
                                 tools=tools, max_output_tokens=request.max_output_tokens)
        return self._last
