"""The metered model gateway: the endpoint the harness serves for one attempt, speaking OpenAI's Chat
Completions and Responses and Anthropic's Messages, streamed or not (uvicorn + Starlette, httpx2 upstream).

Code in the sandbox (the agent's, and the scorer's with its own token) calls one fixed model
through it; provider keys stay in the harness; every request is a gateway_requests row; the
agent's credit is enforced (HTTP 429 past it). See docs/gateway.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rebench.gateway.attempt import API_ENV, GATEWAY_ENV, GATEWAY_PORT, AttemptGateway, check_gateway
    from rebench.gateway.local import LocalCompletion, LocalModel, load_local_model, request_seed
    from rebench.gateway.meters import Credit, Meter
    from rebench.gateway.server import GatewayServer
    from rebench.gateway.upstream_choice import make_upstream
    from rebench.gateway.upstreams import UpstreamError, upstream_price
    from rebench.gateway.usage import MeterUsage, gateway_usage

_WHERE = {
    "API_ENV": "rebench.gateway.attempt",
    "GATEWAY_ENV": "rebench.gateway.attempt",
    "GATEWAY_PORT": "rebench.gateway.attempt",
    "AttemptGateway": "rebench.gateway.attempt",
    "check_gateway": "rebench.gateway.attempt",
    "LocalCompletion": "rebench.gateway.local",
    "LocalModel": "rebench.gateway.local",
    "load_local_model": "rebench.gateway.local",
    "request_seed": "rebench.gateway.local",
    "Credit": "rebench.gateway.meters",
    "Meter": "rebench.gateway.meters",
    "GatewayServer": "rebench.gateway.server",
    "make_upstream": "rebench.gateway.upstream_choice",
    "UpstreamError": "rebench.gateway.upstreams",
    "upstream_price": "rebench.gateway.upstreams",
    "MeterUsage": "rebench.gateway.usage",
    "gateway_usage": "rebench.gateway.usage",
}
"""Where each name lives: the package imports a submodule only when one of its names is first
used, so a command that reads only the usage tables (`rebench attempts`, `report`) does not load
the server, its HTTP stack and the provider SDKs (about half a second of every such command)."""


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "API_ENV",
    "GATEWAY_ENV",
    "GATEWAY_PORT",
    "AttemptGateway",
    "Credit",
    "GatewayServer",
    "LocalCompletion",
    "LocalModel",
    "Meter",
    "MeterUsage",
    "UpstreamError",
    "check_gateway",
    "gateway_usage",
    "load_local_model",
    "make_upstream",
    "request_seed",
    "upstream_price",
]
