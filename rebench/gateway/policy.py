"""What of a request the gateway forwards: parsed under a nesting limit, checked against an
allow-list of fields per endpoint, with the profile's caps on output tokens and samples.

The agent's code writes the request and the operator's key pays for it, so the body sent upstream is
built here from allowed fields only; anything else (service_tier, store, metadata, stream_options,
best_of, ...) is refused with 400 naming the field and the allowed ones, never silently dropped.
`max_tokens` (or `max_completion_tokens`) above the profile's cap is lowered to it, and set to it
when the request leaves it out, so the provider never writes unbounded output; `n` above `max_n` is
refused (lowering it would hand back fewer choices than the caller indexes). See docs/gateway.md.
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
                       "parallel_tool_calls", "response_format", "functions", "function_call"},
    "completions": _COMMON | {"prompt", "echo", "suffix"},
}
"""Per endpoint: what a scaffold needs to sample text and call tools. Not in it, among others:
service_tier, store, metadata, stream_options, prediction, audio, modalities, reasoning_effort, web
search options (they change what the operator pays for or what the provider keeps), and best_of
(completions: best_of samples are paid for, one is returned)."""

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
    """Output tokens of all samples together, at most: the capped max_tokens times n."""


def _positive_int(request: dict[str, Any], name: str) -> int | None:
    value = request.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PolicyError(400, f"{name} must be a positive integer, got {value!r}")
    return value


def plan_request(endpoint: str, request: dict[str, Any], gateway: Gateway) -> Plan:
    """Check `request` (already known to name the allowed model) and build what is forwarded."""
    allowed = ALLOWED_FIELDS[endpoint]
    extra = sorted(set(request) - allowed)
    if extra:
        raise PolicyError(400, f"field {extra[0]!r} is not allowed through this gateway "
                          f"({len(extra)} such field{'s' if len(extra) > 1 else ''}: {', '.join(extra)[:300]}); "
                          f"allowed: {', '.join(sorted(allowed))}")
    if request.get("stream"):
        raise PolicyError(400, "streaming is not supported by this gateway; send stream=false")
    n = _positive_int(request, "n") or 1
    if n > gateway.max_n:
        raise PolicyError(400, f"n={n} is over this gateway's limit of {gateway.max_n} samples a request")
    asked = {name: _positive_int(request, name) for name in ("max_tokens", "max_completion_tokens")}
    given = [name for name, value in asked.items() if value is not None]
    if len(given) > 1:
        raise PolicyError(400, "give one of max_tokens and max_completion_tokens, not both")
    limit_field = given[0] if given else "max_tokens"
    max_tokens = min(asked[limit_field] or gateway.max_tokens, gateway.max_tokens)
    if endpoint == "completions":
        prompt = request.get("prompt")
        one_text = isinstance(prompt, str) or (isinstance(prompt, list) and len(prompt) == 1
                                                and isinstance(prompt[0], str))
        token_ids = (isinstance(prompt, list) and bool(prompt)
                     and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt))
        if not (one_text or token_ids):
            raise PolicyError(400, "prompt must be one string (or a list of one string, or of token ids); "
                              "send batched prompts as separate requests")
    body = {name: value for name, value in request.items() if name in allowed and name != "stream"}
    body[limit_field] = max_tokens
    return Plan(body=body, max_output_tokens=max_tokens * n)
