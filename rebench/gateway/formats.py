"""How each API the gateway serves writes an error and a server-sent event, so that a refusal reaches
an SDK as the error type it knows (OpenAI's `{"error": {...}}`, Anthropic's `{"type": "error", ...}`)
and a stream cut part-way ends with the error event that API's clients watch for."""

from __future__ import annotations

import json
from typing import Any

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/responses": "responses",
             "/v1/messages": "messages", "/v1/messages/count_tokens": "count_tokens"}
"""Path -> the request format served there."""
ANTHROPIC_FORMATS = frozenset({"messages", "count_tokens"})
DONE = b"data: [DONE]\n\n"

_ANTHROPIC_KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}


def anthropic_kind(status: int) -> str:
    return _ANTHROPIC_KINDS.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(fmt: str, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
    """The JSON body of an error answer in the format of the endpoint asked."""
    if fmt in ANTHROPIC_FORMATS:
        return {"type": "error", "error": {"type": anthropic_kind(status), "message": message}}
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


def dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def sse(fmt: str, name: str, data: str) -> bytes:
    """One event as the client's API writes it: chat chunks have data only, the others a name too."""
    if fmt == "chat":
        return f"data: {data}\n\n".encode()
    return f"event: {name}\ndata: {data}\n\n".encode()


def error_event(fmt: str, status: int, message: str, kind: str, sequence: int) -> bytes:
    """The event that ends a stream cut part-way. Each SDK raises on it: OpenAI's on a chunk with an
    `error` object (chat) or an `error` event carrying one (Responses), Anthropic's on an `error` event."""
    if fmt == "chat":
        return sse(fmt, "", dumps({"error": {"message": message, "type": kind, "code": kind, "param": None}}))
    if fmt == "responses":
        return sse(fmt, "error", dumps({"type": "error", "code": kind, "message": message, "param": None,
                                        "sequence_number": sequence,
                                        "error": {"type": kind, "code": kind, "message": message}}))
    return sse(fmt, "error", dumps({"type": "error", "error": {"type": anthropic_kind(status), "message": message}}))


class HttpError(Exception):
    """A request answered with an error: `status`, `kind` (OpenAI's error type) and `code`."""

    def __init__(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code
        self.deferred = False
        """Its row is written once the upstream ends (a 504 the upstream still works on)."""
        self.close = False
        """Its body was not read whole: the connection closes after the answer."""
