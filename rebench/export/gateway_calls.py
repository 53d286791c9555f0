"""An installed agent's model calls rebuilt for Inspect from the bodies its gateway stored.

The gateway (rebench.gateway.agent_meter) records each call of Claude Code, Codex or a declared agent
as a `model_call` event without a `request`; the request and the answer it sent on are a JSON file
beside the attempt's snapshots, named by the event's `extra.body_file`, its API by `extra.endpoint`.
Here that file becomes the `ModelEvent`'s input messages, tools, settings and output, through
Inspect's own converters for the API (`messages_from_anthropic`, `messages_from_openai_responses`,
`messages_from_openai`, `model_output_from_*`). A streamed answer is stored as the server-sent events'
text and is first folded into the whole answer (rebench.export.streamed).

A body file is read only from the attempt's own `model-calls` folder under the database's snapshot
folder, after resolving links: whatever the event names, no other file is opened. A file that is
missing, too large, unreadable or not understood gives the call without its request and a note
saying why, never a failed export.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from inspect_ai.model import ChatMessage, ChatMessageSystem, GenerateConfig, ModelOutput
from inspect_ai.tool import ToolInfo
from pydantic import ValidationError

from rebench.export.body_files import BodyFiles as BodyFiles
from rebench.export.streamed import whole_answer

API_OF_ENDPOINT = {"/v1/messages": "messages", "/v1/responses": "responses", "/v1/chat/completions": "chat"}

T = TypeVar("T")


def _sync(work: Coroutine[Any, Any, T]) -> T:
    """Inspect's converters are coroutines; the export is not (and may be called under a running loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def _text(system: Any) -> str:
    """Anthropic's system prompt: a string or a list of text blocks."""
    if isinstance(system, list):
        return "\n\n".join(str(block.get("text", "")) for block in system if isinstance(block, dict))
    return str(system or "")


async def _input(api: str, request: dict[str, Any], model: str) -> list[ChatMessage]:
    from inspect_ai.model import messages_from_anthropic, messages_from_openai, messages_from_openai_responses

    if api == "messages":
        return await messages_from_anthropic(request.get("messages") or [], _text(request.get("system")) or None)
    if api == "responses":
        given = request.get("input") or []
        items: Any = [{"role": "user", "content": given}] if isinstance(given, str) else given
        messages = await messages_from_openai_responses(items, model)
        if request.get("instructions"):
            messages.insert(0, ChatMessageSystem(content=str(request["instructions"])))
        return messages
    return await messages_from_openai(request.get("messages") or [], model)


async def _output(api: str, request: dict[str, Any], answer: dict[str, Any]) -> ModelOutput:
    from inspect_ai.model import (
        model_output_from_anthropic,
        model_output_from_openai,
        model_output_from_openai_responses,
    )

    if api == "messages":
        return await model_output_from_anthropic(answer)
    # The usage is dropped (the metered one replaces it): the SDK's types can require fields newer than
    # the server that answered (a compatible server's usage lacks `cache_write_tokens`).
    if api == "responses":
        # the provider echoes these; a compatible server may leave them out (the converter needs them)
        whole = {"parallel_tool_calls": True, "tool_choice": request.get("tool_choice") or "auto", **answer,
                 "tools": [], "usage": None}
        return await model_output_from_openai_responses(whole)
    return await model_output_from_openai({**answer, "usage": None})


def _tool(entry: Any) -> ToolInfo | None:
    """One offered tool in any of the three APIs' shapes; a provider's own tool (web search) by its type."""
    if not isinstance(entry, dict):
        return None
    spec = entry["function"] if isinstance(entry.get("function"), dict) else entry
    name = spec.get("name") or entry.get("type")
    if not isinstance(name, str) or not name:
        return None
    description = str(spec.get("description") or "")
    schema = spec.get("input_schema", spec.get("parameters"))
    if isinstance(schema, dict):
        try:
            return ToolInfo.model_validate({"name": name, "description": description, "parameters": schema})
        except ValidationError:
            pass  # a schema Inspect's ToolParams cannot hold: offered without parameters
    return ToolInfo(name=name, description=description)


def _config(request: dict[str, Any]) -> GenerateConfig:
    settings = {"max_tokens": request.get("max_tokens") or request.get("max_output_tokens")
                or request.get("max_completion_tokens"),
                "temperature": request.get("temperature"), "top_p": request.get("top_p")}
    try:
        return GenerateConfig.model_validate({k: v for k, v in settings.items() if v is not None})
    except ValidationError:
        return GenerateConfig()


@dataclass
class GatewayCall:
    """One gateway call as Inspect sees it; `output` None where the answer could not be rebuilt."""

    input: list[ChatMessage] = field(default_factory=list)
    tools: list[ToolInfo] = field(default_factory=list)
    config: GenerateConfig = field(default_factory=GenerateConfig)
    output: ModelOutput | None = None
    notes: list[str] = field(default_factory=list)


class GatewayCalls:
    """Rebuilds an attempt's gateway calls in call order, reusing the previous call's message objects
    where a message is unchanged (as the stored requests' reader does), so the export's memory and
    Inspect's pooling of messages see one object per message, not one per call."""

    def __init__(self, files: BodyFiles | None) -> None:
        self.files = files
        """None: the database's snapshot folder is not known here, and no body file is read."""
        self._messages: list[ChatMessage] = []
        self._dumps: list[dict[str, Any]] = []

    def rebuild(self, extra: dict[str, Any], model: str) -> GatewayCall:
        call = GatewayCall()
        api = API_OF_ENDPOINT.get(str(extra.get("endpoint")))
        if api is None:
            call.notes.append(f"endpoint {extra.get('endpoint')!r} is none of {', '.join(API_OF_ENDPOINT)}")
            return call
        if self.files is None:
            call.notes.append("the snapshot folder holding the body files is not known here: not read")
            return call
        body, why = self.files.read(str(extra.get("body_file")))
        if body is None:
            call.notes.append(str(why))
            return call
        request = body["request"]
        try:
            call.input = self._shared(_sync(_input(api, request, model)))
        except Exception as exc:  # an agent's request Inspect's converter does not take: the call stays
            call.notes.append(f"request not converted ({api}): {type(exc).__name__}: {str(exc)[:300]}")
        call.tools = [tool for tool in map(_tool, request.get("tools") or []) if tool is not None]
        call.config = _config(request)
        answer = body.get("answer")
        streamed = isinstance(answer, str)
        if isinstance(answer, str):
            answer = whole_answer(api, answer)
        status = body.get("status")
        failed = isinstance(status, int) and status >= 400
        if failed:
            call.notes.append(f"the answer was an error (status {status})")
        if not isinstance(answer, dict):
            call.notes.append("the body file holds no reply to rebuild (none, or a stream cut before its first event)")
        elif streamed or not failed:  # a stream cut by an error still holds what came before it
            try:
                call.output = _sync(_output(api, request, answer))
            except Exception as exc:
                call.notes.append(f"answer not converted ({api}): {type(exc).__name__}: {str(exc)[:300]}")
        return call

    def _shared(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        dumps = [message.model_dump(exclude={"id"}) for message in messages]
        shared = [self._messages[i] if i < len(self._dumps) and self._dumps[i] == dump else message
                  for i, (message, dump) in enumerate(zip(messages, dumps, strict=True))]
        self._messages, self._dumps = shared, dumps
        return shared
