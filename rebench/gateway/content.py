"""What a request's messages may hold: content the provider answers offline, from the request alone.

A content block that names a URL (an image or a document by `url`, a Chat `image_url` that is not a
`data:` URL, a Responses `input_image`/`input_file` by URL) makes the provider fetch it: that carries
solution or hidden data out of a sandbox with no network (in the URL), and reads the internet into it
(a web page as a document). A `file_id` source, a `container_upload` or an `item_reference` reads
what the operator's organisation stored with the provider. So each format has an allow-list of block
types and of source types: text, tool calls and their results, thinking, and images and documents
inline (base64, or plain text) up to INLINE_LIMIT each. Anything else is a 400 naming where it is;
requests in one format are checked before any translation, so no other format's block is made of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rebench.gateway.policy import PolicyError

INLINE_LIMIT = 5 * 1024 * 1024
"""Characters of one inline image or document's data (base64): Anthropic's own limit for an image."""

_ANTHROPIC_BLOCKS = frozenset({"text", "image", "document", "tool_use", "tool_result", "thinking",
                               "redacted_thinking"})
_ANTHROPIC_SOURCES = {"image": frozenset({"base64"}), "document": frozenset({"base64", "text", "content"})}
_CHAT_PARTS = frozenset({"text", "image_url", "refusal"})
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file", "refusal", "summary_text",
                              "reasoning_text"})
_RESPONSES_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning", "custom_tool_call",
                              "custom_tool_call_output", "local_shell_call", "local_shell_call_output"})


def _refuse(where: str, what: str) -> PolicyError:
    return PolicyError(400, f"{where}: {what} is not allowed through this gateway: only content the provider "
                       "answers from the request itself (text, tool calls and results, thinking, and images or "
                       f"documents inline as base64 up to {INLINE_LIMIT // (1024 * 1024)} MiB); URLs, file ids "
                       "and stored items would make the provider fetch or read something")


def _inline(where: str, data: Any) -> None:
    if not isinstance(data, str):
        raise PolicyError(400, f"{where}: inline data must be a string")
    if len(data) > INLINE_LIMIT:
        raise PolicyError(400, f"{where}: inline data of {len(data)} characters is over this gateway's limit "
                          f"of {INLINE_LIMIT}")


def _blocks(where: str, content: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (path, block) of a content field: a string holds none; a list holds blocks (objects)."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise PolicyError(400, f"{where} must be a string or a list of content blocks")
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise PolicyError(400, f"{where}[{index}] must be a content block (an object)")
        yield f"{where}[{index}]", block


# ---------------------------------------------------------------- Anthropic Messages (and count_tokens)


def _anthropic_block(where: str, block: dict[str, Any]) -> None:
    kind = block.get("type")
    if kind not in _ANTHROPIC_BLOCKS:
        raise _refuse(f"{where}.type", f"a block of type {kind!r}")
    if kind in _ANTHROPIC_SOURCES:
        source = block.get("source")
        if not isinstance(source, dict):
            raise PolicyError(400, f"{where}.source must be an object")
        if source.get("type") not in _ANTHROPIC_SOURCES[kind]:
            raise _refuse(f"{where}.source.type", f"a {kind} source of type {source.get('type')!r}")
        if source.get("type") == "base64":
            _inline(f"{where}.source.data", source.get("data"))
        elif source.get("type") == "content":
            for path, inner in _blocks(f"{where}.source.content", source.get("content")):
                _anthropic_block(path, inner)
    if kind == "tool_result":
        for path, inner in _blocks(f"{where}.content", block.get("content")):
            _anthropic_block(path, inner)


def check_anthropic(request: dict[str, Any]) -> None:
    for path, block in _blocks("system", request.get("system")):
        _anthropic_block(path, block)
    messages = request.get("messages")
    if not isinstance(messages, list):
        return  # the provider answers a malformed request itself
    for index, message in enumerate(messages):
        if isinstance(message, dict):
            for path, block in _blocks(f"messages[{index}].content", message.get("content")):
                _anthropic_block(path, block)


# ---------------------------------------------------------------- OpenAI Chat Completions


def _data_url(where: str, url: Any) -> None:
    if not isinstance(url, str) or not url.startswith("data:"):
        shown = url[:80] if isinstance(url, str) else url
        raise _refuse(where, f"the URL {shown!r} (only data: URLs are inline)")
    _inline(where, url)


def check_chat(request: dict[str, Any]) -> None:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        for path, part in _blocks(f"messages[{index}].content", message.get("content")):
            kind = part.get("type")
            if kind not in _CHAT_PARTS:
                raise _refuse(f"{path}.type", f"a content part of type {kind!r}")
            if kind == "image_url":
                image = part.get("image_url")
                _data_url(f"{path}.image_url.url", image.get("url") if isinstance(image, dict) else image)


# ---------------------------------------------------------------- OpenAI Responses


def _responses_part(where: str, part: dict[str, Any]) -> None:
    kind = part.get("type")
    if kind not in _RESPONSES_PARTS:
        raise _refuse(f"{where}.type", f"a content part of type {kind!r}")
    if "file_id" in part or "file_url" in part:
        raise _refuse(where, "a file given by id or URL")
    if kind == "input_image":
        _data_url(f"{where}.image_url", part.get("image_url"))
    if kind == "input_file":
        _inline(f"{where}.file_data", part.get("file_data"))


def check_responses(request: dict[str, Any]) -> None:
    items = request.get("input")
    if not isinstance(items, list):
        return
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        where = f"input[{index}]"
        kind = item.get("type", "message")
        if kind not in _RESPONSES_ITEMS:
            raise _refuse(f"{where}.type", f"an input item of type {kind!r}")
        for path, part in _blocks(f"{where}.content", item.get("content")):
            _responses_part(path, part)
        for path, part in _blocks(f"{where}.output", item.get("output")):  # a tool's output, as parts
            _responses_part(path, part)


CHECKS = {"messages": check_anthropic, "count_tokens": check_anthropic, "chat": check_chat,
          "responses": check_responses}


def check_content(endpoint: str, request: dict[str, Any]) -> None:
    """PolicyError 400 naming the first block, part or item that is not allowed (module docstring)."""
    check = CHECKS.get(endpoint)
    if check is not None:
        check(request)
