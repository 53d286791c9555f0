"""Requests in one provider's format for an upstream that speaks another, through Chat Completions.

Chat Completions is the pivot: an Anthropic Messages or OpenAI Responses request becomes a chat
request (`messages_to_chat`, `responses_to_chat`), and a chat request becomes a Messages one for an
Anthropic upstream (`chat_to_messages`). A field with no counterpart on the other side is refused with
a 400 naming it (`Untranslatable`), never dropped, except hints that change nothing of the answer's
meaning (cache markers, `store: false`, a prompt cache key, reasoning effort or a thinking budget,
`include`). Tool calls
and their results keep their ids, so a conversation goes on in either format.
"""

from __future__ import annotations

import json
from typing import Any

from rebench.gateway.policy import PolicyError

ANTHROPIC_STOP = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                  "pause_turn": "stop", "refusal": "content_filter"}
CHAT_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
             "content_filter": "refusal"}


class Untranslatable(PolicyError):
    def __init__(self, field: str, source: str, target: str, why: str = "") -> None:
        super().__init__(400, f"field {field!r} of this {source} request cannot be translated for this gateway's "
                         f"upstream, which speaks {target}{': ' + why if why else ''}; leave it out")


def _text_or_parts(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Chat content: one string when every part is text (what local models and most servers want)."""
    if all(p.get("type") == "text" for p in parts):
        return "".join(str(p.get("text", "")) for p in parts)
    return parts


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


# -- Anthropic Messages -> chat --------------------------------------------------------------------

def _image_to_chat(block: dict[str, Any]) -> dict[str, Any]:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        raise Untranslatable("messages[].content[].source", "Messages", "Chat Completions",
                             f"image source {source.get('type')!r}")
    return {"type": "image_url", "image_url": {"url": url}}


def _anthropic_turn(message: dict[str, Any], out: list[dict[str, Any]]) -> None:
    role, content = message.get("role"), message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if role not in ("user", "assistant") or not isinstance(blocks, list):
        raise PolicyError(400, "each message needs role user or assistant and content (a string or blocks)")
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append(_image_to_chat(block))
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input", {}))}})
        elif kind == "tool_result" and role == "user":
            result = block.get("content", "")
            text = _block_text(result) if not isinstance(result, str) else result
            if block.get("is_error"):
                text = f"(error) {text}"
            out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # the model's own earlier reasoning: nothing to send to another provider
        else:
            raise Untranslatable(f"messages[].content[].type={kind}", "Messages", "Chat Completions")
    if role == "assistant":
        entry: dict[str, Any] = {"role": "assistant", "content": _text_or_parts(parts) if parts else None}
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    elif parts:
        out.append({"role": "user", "content": _text_or_parts(parts)})


def messages_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request as a chat request (the caps were set by the policy)."""
    for field in ("top_k",):
        if body.get(field) is not None:
            raise Untranslatable(field, "Messages", "Chat Completions")
    # `thinking` is left out: like Responses' `reasoning`, it asks how much to think, not what to answer
    chat: dict[str, Any] = {"model": body.get("model")}
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _block_text(system)})
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            raise PolicyError(400, "messages must be a list of message objects")
        if message.get("role") == "system":  # a system message between turns (Claude Code sends them)
            messages.append({"role": "system", "content": _block_text(message.get("content"))})
            continue
        _anthropic_turn(message, messages)
    chat["messages"] = messages
    for source, target in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                           ("stop_sequences", "stop")):
        if body.get(source) is not None:
            chat[target] = body[source]
    if body.get("tools"):
        chat["tools"] = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema") or {"type": "object"}}} for t in body["tools"]]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        chat["tool_choice"] = ({"type": "function", "function": {"name": choice.get("name")}} if kind == "tool"
                               else {"auto": "auto", "any": "required", "none": "none"}.get(str(kind), "auto"))
        if choice.get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    user = (body.get("metadata") or {}).get("user_id")
    if user:
        chat["user"] = str(user)
    return chat


# -- OpenAI Responses -> chat ----------------------------------------------------------------------

def _responses_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content or []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        else:
            raise Untranslatable(f"input[].content[].type={kind}", "Responses", "Chat Completions")
    return _text_or_parts(parts)


def _responses_items(items: list[Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise PolicyError(400, "input must be a string or a list of input items")
        kind = item.get("type", "message")
        if kind == "message":
            role = {"developer": "system"}.get(str(item.get("role")), item.get("role"))
            if role not in ("system", "user", "assistant"):
                raise PolicyError(400, f"input message role {item.get('role')!r} is not system, developer, user or "
                                  "assistant")
            messages.append({"role": role, "content": _responses_content(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one turn: its text and its calls
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output", "")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _block_text_responses(output)})
        elif kind == "reasoning":
            continue  # the model's own earlier reasoning: nothing to send to another model
        else:
            raise Untranslatable(f"input[].type={kind}", "Responses", "Chat Completions")
    return messages


def _block_text_responses(parts: Any) -> str:
    return "".join(str(p.get("text", "")) for p in parts or [] if isinstance(p, dict))


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI Responses request as a chat request."""
    chat: dict[str, Any] = {"model": body.get("model")}
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        messages.extend(_responses_items(given))
    else:
        raise PolicyError(400, "input must be a string or a list of input items")
    chat["messages"] = messages
    for source, target in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
                           ("parallel_tool_calls", "parallel_tool_calls"), ("user", "user")):
        if body.get(source) is not None:
            chat[target] = body[source]
    tools = []
    for tool in body.get("tools") or []:
        if tool.get("type") != "function":
            raise Untranslatable(f"tools[].type={tool.get('type')}", "Responses", "Chat Completions")
        fields = ("name", "description", "parameters", "strict")
        tools.append({"type": "function", "function": {k: tool[k] for k in fields if tool.get(k) is not None}})
    if tools:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function":
            raise Untranslatable(f"tool_choice.type={choice.get('type')}", "Responses", "Chat Completions")
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif choice is not None:
        chat["tool_choice"] = choice
    text_format = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            k: text_format[k] for k in ("name", "schema", "strict", "description") if k in text_format}}
    elif isinstance(text_format, dict) and text_format.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    return chat


# -- chat -> Anthropic Messages --------------------------------------------------------------------

_NO_MESSAGES_FIELDS = ("logprobs", "top_logprobs", "logit_bias", "presence_penalty", "frequency_penalty", "seed",
                       "functions", "function_call", "echo", "suffix")


def _chat_image(part: dict[str, Any]) -> dict[str, Any]:
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _chat_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "image_url":
            blocks.append(_chat_image(part))
        else:
            raise Untranslatable(f"messages[].content[].type={kind}", "Chat Completions", "Anthropic Messages")
    return blocks


def _tool_input(arguments: Any) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if isinstance(arguments, str) and arguments else (arguments or {})
    except ValueError:
        raise PolicyError(400, f"tool call arguments are not JSON: {str(arguments)[:100]}") from None
    if not isinstance(value, dict):
        raise PolicyError(400, "tool call arguments must be a JSON object for Anthropic's tool_use")
    return value


def chat_to_messages(body: dict[str, Any]) -> dict[str, Any]:
    """A chat request as an Anthropic Messages request (consecutive turns of one role are merged)."""
    for field in _NO_MESSAGES_FIELDS:
        if body.get(field) not in (None, False):
            raise Untranslatable(field, "Chat Completions", "Anthropic Messages")
    if (body.get("n") or 1) > 1:
        raise Untranslatable("n", "Chat Completions", "Anthropic Messages", "one sample a request")
    response_format = body.get("response_format")
    if response_format is not None and response_format.get("type") != "text":
        raise Untranslatable("response_format", "Chat Completions", "Anthropic Messages")
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and temperature > 1:
        raise Untranslatable("temperature", "Chat Completions", "Anthropic Messages", "it takes 0 to 1")
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]], first: bool = False) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] = (blocks + turns[-1]["content"]) if first else turns[-1]["content"] + blocks
        else:
            turns.append({"role": role, "content": blocks})

    for message in body.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_block_text(message.get("content")))
        elif role == "user":
            add("user", _chat_blocks(message.get("content")))
        elif role == "assistant":
            blocks = _chat_blocks(message.get("content"))
            blocks += [{"type": "tool_use", "id": c.get("id"), "name": (c.get("function") or {}).get("name"),
                        "input": _tool_input((c.get("function") or {}).get("arguments"))}
                       for c in message.get("tool_calls") or []]
            add("assistant", blocks)
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                          "content": _block_text(message.get("content"))}])
        else:
            raise PolicyError(400, f"message role {role!r} is not system, developer, user, assistant or tool")
    anthropic: dict[str, Any] = {"model": body.get("model"), "messages": turns,
                                 "max_tokens": body.get("max_tokens") or body.get("max_completion_tokens")}
    if system:
        anthropic["system"] = [{"type": "text", "text": "\n\n".join(system)}]
    for source, target in (("temperature", "temperature"), ("top_p", "top_p")):
        if body.get(source) is not None:
            anthropic[target] = body[source]
    stop = body.get("stop")
    if stop:
        anthropic["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if body.get("tools"):
        anthropic["tools"] = [{"name": f.get("name"), "description": f.get("description", ""),
                               "input_schema": f.get("parameters") or {"type": "object", "properties": {}}}
                              for f in (t.get("function") or {} for t in body["tools"])]
    choice = body.get("tool_choice")
    if choice is not None or body.get("parallel_tool_calls") is False:
        if isinstance(choice, dict):
            anthropic_choice: dict[str, Any] = {"type": "tool", "name": (choice.get("function") or {}).get("name")}
        else:
            anthropic_choice = {"type": {"required": "any", "none": "none"}.get(str(choice), "auto")}
        if body.get("parallel_tool_calls") is False and anthropic_choice["type"] != "none":
            anthropic_choice["disable_parallel_tool_use"] = True
        anthropic["tool_choice"] = anthropic_choice
    if body.get("user"):
        anthropic["metadata"] = {"user_id": str(body["user"])}
    return anthropic
