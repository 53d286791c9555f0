"""The upstream a gateway's profile names, built: kept apart from rebench.gateway.upstreams (the types
every upstream shares) so the concrete upstreams can import those types without a cycle."""

from __future__ import annotations

from pathlib import Path

from rebench.environments.metadata import Gateway
from rebench.gateway.local import load_local_model
from rebench.gateway.upstream_http import AnthropicUpstream, OpenAIWireUpstream
from rebench.gateway.upstream_local import LocalUpstream
from rebench.gateway.upstreams import Upstream, UpstreamError


def make_upstream(gateway: Gateway, env_root: Path, assets: Path | None) -> Upstream:
    """The upstream a profile's [gateway] names (a local model is loaded here: slow, call in a thread)."""
    provider, _, name = gateway.upstream.partition("/")
    if provider == "local":
        if not gateway.local_model:
            raise UpstreamError(500, f"gateway upstream {gateway.upstream!r} needs local_model")
        return LocalUpstream(load_local_model(env_root, gateway.local_model, assets), gateway.model,
                             gateway.max_tokens)
    if provider == "anthropic":
        return AnthropicUpstream(name, gateway.timeout_s, gateway.max_tokens, gateway.base_url)
    return OpenAIWireUpstream(provider, name, gateway.base_url, gateway.timeout_s)
