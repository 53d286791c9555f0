"""The metered model gateway: the endpoint the harness serves for one attempt, speaking OpenAI's Chat
Completions and Responses and Anthropic's Messages, streamed or not (uvicorn + Starlette, httpx2 upstream).

Code in the sandbox (the agent's, and the scorer's with its own token) calls one fixed model
through it; provider keys stay in the harness; every request is a gateway_requests row; the
agent's credit is enforced (HTTP 429 past it). See docs/gateway.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from rebench.gateway.attempt import API_ENV, GATEWAY_ENV, GATEWAY_PORT, AttemptGateway, check_gateway
    from rebench.gateway.local import LocalCompletion, LocalModel, load_local_model, request_seed
    from rebench.gateway.meters import Credit, Meter
    from rebench.gateway.server import GatewayServer
    from rebench.gateway.upstream_choice import make_upstream
    from rebench.gateway.upstreams import UpstreamError, upstream_price
    from rebench.gateway.usage import MeterUsage, gateway_usage

# Each submodule is imported when one of its names is first used, so a command that reads only the
# usage tables (`rebench attempts`, `report`) does not load the server, its HTTP stack and the
# provider SDKs (about half a second of every such command).
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "attempt": ["API_ENV", "GATEWAY_ENV", "GATEWAY_PORT", "AttemptGateway", "check_gateway"],
    "local": ["LocalCompletion", "LocalModel", "load_local_model", "request_seed"],
    "meters": ["Credit", "Meter"],
    "server": ["GatewayServer"],
    "upstream_choice": ["make_upstream"],
    "upstreams": ["UpstreamError", "upstream_price"],
    "usage": ["MeterUsage", "gateway_usage"],
})
