"""What of a request the gateway forwards: parsed under a nesting limit, checked against an
allow-list of fields per endpoint, with the profile's caps on output tokens and samples.

The agent's code writes the request and the operator's key pays for it, so the body sent upstream is
built here from allowed fields only; anything else (service_tier, metadata beyond a user id, best_of,
mcp_servers, ...) is refused with 400 naming the field and the allowed ones, never silently dropped.
The output cap (`max_tokens`, `max_completion_tokens`, `max_output_tokens`) above the profile's is
lowered to it, and set to it when the request leaves it out, so the provider never writes unbounded
output; `n` above `max_n` is refused (lowering it would hand back fewer choices than the caller
indexes). Tools that run on the provider's side (web search, code execution, fetching URLs) would give
the sandbox a way out: only tools the caller runs itself pass. See docs/gateway.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rebench.environments.metadata import Gateway

MAX_DEPTH = 64
"""Arrays and objects nested deeper than this are refused before json.loads recurses into them."""

_COMMON = frozenset({"model", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty",
                     "frequency_penalty", "logit_bias", "logprobs", "user", "stream"})
ALLOWED_FIELDS = {
    "chat": _COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                       "parallel_tool_calls", "response_format", "functions", "function_call", "stream_options"},
    "completions": _COMMON | {"prompt", "echo", "suffix"},
    "responses": frozenset({"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools",
                            "tool_choice", "parallel_tool_calls", "stream", "text", "reasoning", "include", "store",
                            "prompt_cache_key", "user"}),
    "messages": frozenset({"model", "messages", "system", "max_tokens", "temperature", "top_p", "top_k",
                           "stop_sequences", "stream", "tools", "tool_choice", "metadata", "thinking",
                           "context_management", "output_config"}),
    "count_tokens": frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking",
                               "context_management", "output_config"}),
}
"""Per endpoint: what a scaffold needs to sample text and call tools. Not in it, among others:
service_tier, metadata (chat, responses), stream_options beyond include_usage, prediction, audio,
modalities, previous_response_id and background (they keep state on the provider), mcp_servers and
container (Messages), best_of (completions: best_of samples are paid for, one is returned)."""

DROPPED_HINTS = {"responses": frozenset({"client_metadata"})}
"""Fields a known client always sends that change nothing of the answer (Codex's `client_metadata`: its
session ids): accepted and not forwarded, so the agent works and the provider learns nothing of it."""

ANTHROPIC_BETAS = frozenset({
    "claude-code", "interleaved-thinking", "context-management", "mid-conversation-tool-changes",
    "advanced-tool-use", "effort", "thinking-token-count", "thinking-display-updates", "token-efficient-tools",
    "fine-grained-tool-streaming", "prompt-caching", "output-128k", "context-1m", "token-counting"})
"""`anthropic-beta` flags passed on to an Anthropic upstream, by name (a flag is `NAME-YYYY-MM-DD` or
`NAME-YYYYMMDD`):
features of sampling and of the conversation's shape. Claude Code 2.1.332 sends the first eight of them
on every request (seen at the gateway in its installed-agent test). Any other flag is refused: the rest
(files, MCP servers and tunnels, code execution, agent memory, skills, batches, ...) reach the operator's
account or run on the provider's side, and a flag nobody has read is not passed on unread."""

_BETA_FLAG = re.compile(r"(?P<name>[a-z0-9]+(?:-[a-z0-9]+)*?)-(?P<date>20[0-9]{2}-?[01][0-9]-?[0-3][0-9])")
MAX_BETAS = 16


def allowed_betas(header: str | None) -> str | None:
    """The caller's `anthropic-beta` flags when all are on ANTHROPIC_BETAS (None: no header or no flags);
    PolicyError 400 naming the first flag that is not, and what is allowed."""
    flags = [flag.strip() for flag in (header or "").split(",") if flag.strip()]
    if len(flags) > MAX_BETAS:
        raise PolicyError(400, f"anthropic-beta: {len(flags)} flags; at most {MAX_BETAS} are taken")
    for flag in flags:
        match = _BETA_FLAG.fullmatch(flag)
        if match is None or match["name"] not in ANTHROPIC_BETAS:
            raise PolicyError(400, f"anthropic-beta flag {flag[:80]!r} is not passed on by this gateway; "
                                   f"allowed: {', '.join(sorted(ANTHROPIC_BETAS))} "
                                   "(each NAME-YYYY-MM-DD or NAME-YYYYMMDD)")
    return ",".join(dict.fromkeys(flags)) or None


OUTPUT_FIELD = {"chat": "max_tokens", "completions": "max_tokens", "responses": "max_output_tokens",
                "messages": "max_tokens"}
"""The field that caps a request's output tokens, per endpoint (chat also takes max_completion_tokens)."""

CLIENT_TOOLS = {
    "chat": ("function",),
    "responses": ("function", "custom", "local_shell"),
    "messages": ("custom", "bash_", "text_editor_", "computer_", "memory_"),
}
"""Tool types (or prefixes of them) the caller runs itself: the only ones allowed. Anthropic's tools
without a `type` are custom ones."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKETS_ONLY = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


class PolicyError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def check_depth(body: bytes, limit: int = MAX_DEPTH) -> None:
    """PolicyError 400 when brackets outside JSON strings nest deeper than `limit`. Linear in the body
    (C-level passes over its brackets, one per level), so it runs before json.loads can recurse."""
    skeleton = _STRING.sub(b"", body).translate(_SQUARE, _BRACKETS_ONLY)
    for _ in range(limit):
        if not skeleton:
            return
        skeleton = skeleton.replace(b"[]", b"")
    if skeleton:
        raise PolicyError(400, f"the request body nests arrays and objects too deep (over {limit} levels) "
                          "or leaves brackets unbalanced")


def parse_body(body: bytes) -> dict[str, Any]:
    """The request's JSON object; PolicyError 400 when it is not one, or is nested too deep."""
    check_depth(body)
    try:
        request = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise PolicyError(400, "the request body is not JSON") from None
    if not isinstance(request, dict):
        raise PolicyError(400, "the request body must be a JSON object")
    return request


@dataclass
class Plan:
    """A checked request: the body to forward and the most output it may cost."""

    body: dict[str, Any]
    max_output_tokens: int
    """Output tokens of all samples together, at most: the capped output limit times n."""
    stream: bool = False
    include_usage: bool = False
    """A streamed chat request asked for the usage chunk (the gateway always asks the upstream for it)."""


def _positive_int(request: dict[str, Any], name: str) -> int | None:
    value = request.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PolicyError(400, f"{name} must be a positive integer, got {value!r}")
    return value


def _check_fields(endpoint: str, request: dict[str, Any]) -> None:
    allowed = ALLOWED_FIELDS[endpoint]
    extra = sorted(set(request) - allowed - DROPPED_HINTS.get(endpoint, frozenset()))
    if extra:
        raise PolicyError(400, f"field {extra[0]!r} is not allowed through this gateway "
                          f"({len(extra)} such field{'s' if len(extra) > 1 else ''}: {', '.join(extra)[:300]}); "
                          f"allowed: {', '.join(sorted(allowed))}")


def _check_tools(endpoint: str, request: dict[str, Any]) -> None:
    tools = request.get("tools")
    if tools is None:
        return
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise PolicyError(400, "tools must be a list of tool objects")
    kinds = CLIENT_TOOLS["chat" if endpoint == "chat" else "messages" if endpoint == "count_tokens" else endpoint]
    for tool in tools:
        kind = tool.get("type", "custom" if endpoint in ("messages", "count_tokens") else None)
        if not isinstance(kind, str) or not kind.startswith(kinds):
            raise PolicyError(400, f"tool type {kind!r} is not allowed through this gateway: only tools the "
                              f"caller runs itself ({', '.join(kinds)}); tools that run on the provider's side "
                              "(web search, code execution, fetching) are not")


def _check_flags(endpoint: str, request: dict[str, Any]) -> tuple[bool, bool]:
    """(stream, include_usage), checked."""
    stream = request.get("stream")
    if stream not in (None, True, False):
        raise PolicyError(400, f"stream must be true or false, got {stream!r}")
    if stream and endpoint == "completions":
        raise PolicyError(400, "streaming is served for /v1/chat/completions, /v1/responses and /v1/messages, "
                          "not /v1/completions; send stream=false")
    options = request.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream or not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise PolicyError(400, "field 'stream_options' is allowed only with stream=true and may only hold "
                              f"include_usage; allowed fields: {', '.join(sorted(ALLOWED_FIELDS[endpoint]))}")
        include_usage = bool(options.get("include_usage"))
    if request.get("store") not in (None, False):
        raise PolicyError(400, "store must be false (the provider keeps nothing of a request through this gateway)")
    metadata = request.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or set(metadata) - {"user_id"}):
        raise PolicyError(400, "metadata may only hold user_id")
    return bool(stream), include_usage


def _output_cap(endpoint: str, request: dict[str, Any], gateway: Gateway) -> tuple[str, int]:
    """The field that caps output and its capped value."""
    names = ["max_tokens", "max_completion_tokens"] if endpoint == "chat" else [OUTPUT_FIELD[endpoint]]
    asked = {name: _positive_int(request, name) for name in names}
    given = [name for name, value in asked.items() if value is not None]
    if len(given) > 1:
        raise PolicyError(400, "give one of max_tokens and max_completion_tokens, not both")
    field = given[0] if given else names[0]
    return field, min(asked[field] or gateway.max_tokens, gateway.max_tokens)


def _check_prompt(request: dict[str, Any]) -> None:
    prompt = request.get("prompt")
    one_text = isinstance(prompt, str) or (isinstance(prompt, list) and len(prompt) == 1
                                            and isinstance(prompt[0], str))
    token_ids = (isinstance(prompt, list) and bool(prompt)
                 and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt))
    if not (one_text or token_ids):
        raise PolicyError(400, "prompt must be one string (or a list of one string, or of token ids); "
                          "send batched prompts as separate requests")


def plan_request(endpoint: str, request: dict[str, Any], gateway: Gateway) -> Plan:
    """Check `request` (already known to name the allowed model) and build what is forwarded."""
    _check_fields(endpoint, request)
    _check_tools(endpoint, request)
    stream, include_usage = _check_flags(endpoint, request)
    dropped = DROPPED_HINTS.get(endpoint, frozenset()) | {"stream", "stream_options"}
    body = {name: value for name, value in request.items() if name not in dropped}
    if endpoint == "count_tokens":
        return Plan(body=body, max_output_tokens=0)
    n = _positive_int(request, "n") or 1
    if n > gateway.max_n:
        raise PolicyError(400, f"n={n} is over this gateway's limit of {gateway.max_n} samples a request")
    if endpoint == "completions":
        _check_prompt(request)
    field, max_tokens = _output_cap(endpoint, request, gateway)
    body[field] = max_tokens
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and isinstance(thinking.get("budget_tokens"), int) \
            and thinking["budget_tokens"] >= max_tokens:  # Anthropic wants the budget below max_tokens
        body["thinking"] = {**thinking, "budget_tokens": max(1, max_tokens - 1)}
    return Plan(body=body, max_output_tokens=max_tokens * n, stream=stream, include_usage=include_usage)
