"""Model providers for LLM agents: names, SDK clients, prices, retries.

`check_model_available` is called by the CLI/runner before any sandbox starts,
so a missing key or an unknown provider is a one-line error that costs nothing.
The SDKs (`openai`, `anthropic`) are imported only when a client is built.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Protocol

import lazy_loader

from rebench.errors import RebenchError
from rebench.models.messages import (
    Completion,
    ContextWindowExceeded,
    Message,
    ModelClient,
    ProviderError,
    ToolCall,
    ToolSpec,
)
from rebench.models.names import KEY_VARIABLES, PROVIDERS, ModelSpec, parse_model, read_key, require_key
from rebench.models.prices import DEFAULT_CONTEXT_WINDOW, ModelPrice, load_prices, price_for

if TYPE_CHECKING:
    from rebench.models.calls import RETRY_PAUSE_REASON, ModelCaller, RetryPolicy

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "KEY_VARIABLES",
    "PROVIDERS",
    "RETRY_PAUSE_REASON",
    "Completion",
    "ContextWindowExceeded",
    "Message",
    "ModelCaller",
    "ModelClient",
    "ModelPrice",
    "ModelSpec",
    "ProviderError",
    "RetryPolicy",
    "ToolCall",
    "ToolSpec",
    "check_model_available",
    "create_model_client",
    "load_prices",
    "model_price",
    "model_spec",
    "parse_model",
    "price_for",
    "read_key",
    "require_key",
]

# The caller's names load on first use (lazy_loader, as rebench.agents' do): rebench.models.calls logs
# requests in the store (SQLAlchemy, about 0.3 s), and `rebench run --help` or a usage error reads
# only the agent's configuration.
__getattr__, _lazy_dir, _lazy_names = lazy_loader.attach(__name__, submod_attrs={
    "calls": ["RETRY_PAUSE_REASON", "ModelCaller", "RetryPolicy"]})



class ModelChoice(Protocol):
    """What the functions here read of an agent's configuration (`rebench.agents.base.AgentConfig`)."""

    name: str
    model: str | None
    base_url: str | None
    args: dict[str, str]
    cost_limit_usd: float | None


_SDK_MODULES = {"openai": "openai", "openai-compatible": "openai", "anthropic": "anthropic"}


def model_spec(config: ModelChoice) -> ModelSpec:
    """The model an agent config names; a missing or malformed name is a one-line error."""
    if not config.model:
        raise RebenchError(f"agent {config.name!r} needs --model provider/model (providers: {', '.join(PROVIDERS)})")
    return parse_model(config.model, base_url=config.base_url, key_variable=config.args.get("api_key_env"))


def model_price(config: ModelChoice, spec: ModelSpec) -> ModelPrice:
    return price_for(spec.full_name, config.args.get("prices"))


def check_model_available(config: ModelChoice) -> None:
    """Fail fast, before any sandbox starts: bad model name, missing key, missing
    SDK, unreadable price table, or a cost limit for a model with no price.

    Does nothing for agents configured without a model (they need none)."""
    if not config.model:
        return
    spec = model_spec(config)
    module = _SDK_MODULES[spec.provider]
    if importlib.util.find_spec(module) is None:
        raise RebenchError(f"model {spec.full_name!r} needs the {module} package: pip install 'rebench[llm]'")
    require_key(spec)
    price = model_price(config, spec)
    if config.cost_limit_usd is not None and not price.priced:
        raise RebenchError(
            f"--cost-limit needs a price for {spec.full_name!r}: add it to a price table"
            " named by REBENCH_PRICES or --agent-arg prices=PATH"
        )


def create_model_client(config: ModelChoice, *, request_timeout_s: float = 600.0) -> ModelClient:
    """An SDK client for the configured model, keyed from the environment only."""
    check_model_available(config)
    spec = model_spec(config)
    key = require_key(spec)
    if spec.provider == "anthropic":
        from rebench.models.anthropic_provider import AnthropicClient

        return AnthropicClient(spec, key, request_timeout_s=request_timeout_s)
    from rebench.models.openai_provider import OpenAIChatClient

    return OpenAIChatClient(spec, key, request_timeout_s=request_timeout_s)
