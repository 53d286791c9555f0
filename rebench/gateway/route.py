"""Which format a request goes upstream in: its own when the upstream speaks it, else through chat
(rebench.gateway.translate); and the upstream's answer turned back into the caller's format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rebench.gateway.replies import chat_reply_to_messages, chat_reply_to_responses, messages_reply_to_chat
from rebench.gateway.translate import chat_to_messages, messages_to_chat, responses_to_chat
from rebench.gateway.upstreams import Upstream, UpstreamError


@dataclass
class Route:
    client: str
    """The caller's format (the endpoint it asked)."""
    upstream: str
    """The format sent upstream."""
    body: dict[str, Any]
    """The body sent upstream (its model name is replaced by the upstream's when sent)."""


def make_route(fmt: str, body: dict[str, Any], upstream: Upstream) -> Route:
    """Untranslatable (a PolicyError, 400) for a field with no counterpart upstream."""
    if fmt in upstream.formats:
        return Route(fmt, fmt, body)
    if fmt == "completions":
        raise UpstreamError(404, "this gateway's upstream serves /v1/chat/completions, /v1/responses and "
                            "/v1/messages, not /v1/completions", "invalid_request_error")
    chat = body if fmt == "chat" else messages_to_chat(body) if fmt == "messages" else responses_to_chat(body)
    if "chat" in upstream.formats:
        return Route(fmt, "chat", chat)
    return Route(fmt, "messages", chat_to_messages(chat))


def convert_reply(route: Route, reply: dict[str, Any]) -> dict[str, Any]:
    if route.client == route.upstream:
        return reply
    chat = messages_reply_to_chat(reply) if route.upstream == "messages" else reply
    if route.client == "chat":
        return chat
    return chat_reply_to_messages(chat) if route.client == "messages" else chat_reply_to_responses(chat)
