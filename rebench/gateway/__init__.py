"""The metered model gateway: the endpoint the harness serves for one attempt, speaking OpenAI's Chat
Completions and Responses and Anthropic's Messages, streamed or not (uvicorn + Starlette, httpx2 upstream).

Code in the sandbox (the agent's, and the scorer's with its own token) calls one fixed model
through it; provider keys stay in the harness; every request is a gateway_requests row; the
agent's credit is enforced (HTTP 429 past it). See docs/gateway.md.
"""

from rebench.gateway.attempt import API_ENV, GATEWAY_ENV, GATEWAY_PORT, AttemptGateway, check_gateway
from rebench.gateway.local import LocalCompletion, LocalModel, load_local_model, request_seed
from rebench.gateway.meters import Credit, Meter
from rebench.gateway.server import GatewayServer
from rebench.gateway.upstream_choice import make_upstream
from rebench.gateway.upstreams import UpstreamError, upstream_price
from rebench.gateway.usage import MeterUsage, gateway_usage

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
