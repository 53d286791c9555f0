"""An installed agent's own gateway: the run's model (`--model`, `--base-url`) served to the agent in the
sandbox through the same metered server as environment gateways, and every call it makes recorded.

The provider key stays here, in the harness; the sandbox holds a per-attempt token. Each answered
request of the agent's meter becomes a `model_call` event (text, tool calls, tokens, cost, wait) through
the attempt's context, which also counts tokens and cost against `--token-limit` / `--cost-limit`; the
request and answer bodies are files beside the attempt's snapshots (`model-calls/NNNN.json`), the event
naming them. Once a limit is reached every later request is refused with 429 and the agent is stopped.
A provider's rate limits, overloads and 5xx are retried here with the clock paused (agent_retry).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rebench.clock import PauseInterval
from rebench.environments.metadata import Gateway
from rebench.errors import LimitExceeded
from rebench.gateway.agent_retry import RetryingUpstream
from rebench.gateway.formats import HttpError
from rebench.gateway.meters import Meter
from rebench.gateway.server import GatewayServer
from rebench.gateway.transcript import Exchange, said
from rebench.gateway.upstream_choice import make_upstream
from rebench.gateway.upstreams import upstream_price
from rebench.models.names import parse_model, require_key
from rebench.models.usage import ModelUsage

SOCKET_NAME = "agent-gateway.sock"
AGENT_GATEWAY_PORT = 4142
"""The agent's gateway inside a Docker sandbox (the environment's own is on 4141)."""
CONCURRENCY = 4
INSTALLED_AGENT_METER = "agent_model"
"""gateway_requests.meter of an installed agent's calls to its own model."""


class ModelChoice(Protocol):
    """The run's model settings (an agent's AgentConfig)."""

    model: str | None
    base_url: str | None
    cost_limit_usd: float | None


class MeteredAttempt(Protocol):
    """What the gateway needs of the attempt: its clock, to pause while a provider's errors are retried,
    and its records (an agent's AgentContext has both)."""

    def pause(self, reason: str) -> AbstractContextManager[PauseInterval]: ...

    def record_model_call(self, usage: ModelUsage, **event: Any) -> None: ...

    def log_event(self, kind: str, **data: Any) -> None: ...


def agent_gateway_config(config: ModelChoice, max_tokens: int) -> Gateway:
    """The Gateway an installed agent gets: the one model of the run, its credit the run's cost limit."""
    if not config.model:
        raise ValueError("an installed agent needs --model PROVIDER/NAME")
    spec = parse_model(config.model, base_url=config.base_url)
    if spec.provider == "local":
        raise ValueError("an installed agent's model must be a provider's (openai, anthropic, openai-compatible)")
    require_key(spec)
    return Gateway(model=spec.name, upstream=f"{spec.provider}/{spec.name}", base_url=config.base_url,
                   credit_usd=config.cost_limit_usd, concurrency=CONCURRENCY, timeout_s=600,
                   max_tokens=max_tokens, max_n=1)


class _AgentServer(GatewayServer):
    """The agent's gateway: a credit refusal of the agent's meter is its cost limit reached."""

    on_refused: Callable[[str], None] | None = None
    # Its rows are the agent's own model calls, apart from any environment gateway's "agent" rows
    # (what the agent's code asked of an environment's model), which reports count as such.
    row_meters: ClassVar[Mapping[str, str]] = {"agent": INSTALLED_AGENT_METER}

    def refuse_credit(self, meter: Meter, worst: float) -> HttpError:
        refusal = super().refuse_credit(meter, worst)
        if meter.name == "agent" and self.on_refused is not None:
            self.on_refused(str(refusal))
        return refusal


class AgentGateway:
    """One attempt's gateway for its installed agent, on a Unix socket in its own host folder."""

    def __init__(self, gateway: Gateway, calls_dir: Path, *, retry_base_s: float = 2.0) -> None:
        self.gateway = gateway
        self.retry_base_s = retry_base_s
        self.calls_dir = calls_dir
        self.socket_dir = Path(tempfile.mkdtemp(prefix="rbag-"))
        self.socket_dir.chmod(0o700)
        self.server: GatewayServer | None = None
        self.ctx: MeteredAttempt | None = None
        self.limit: LimitExceeded | None = None
        """Set when a call reached the token or cost limit: the agent must stop."""
        self.calls = 0
        self.price_known = False

    @property
    def socket_path(self) -> str:
        return str(self.socket_dir / SOCKET_NAME)

    @property
    def token(self) -> str:
        assert self.server is not None, "start() first"
        return self.server.meters["agent"].token

    async def start(self, ctx: MeteredAttempt) -> None:
        store = getattr(getattr(ctx, "recorder", None), "store", None)
        attempt_id = int(getattr(getattr(ctx, "recorder", None), "attempt_id", 0))
        upstream = RetryingUpstream(make_upstream(self.gateway, Path("."), None), ctx.pause,
                                    base_s=self.retry_base_s)
        self.ctx = ctx
        self.price_known = upstream_price(self.gateway).priced
        server = _AgentServer(self.gateway, upstream, store=store, attempt_id=attempt_id,
                              price=upstream_price(self.gateway))
        server.observer = self._observe
        server.on_refused = self._refused
        self.server = server
        await self.server.start_unix(self.socket_path)

    def _observe(self, exchange: Exchange) -> None:
        if exchange.meter != "agent" or self.ctx is None:
            return
        self.calls += 1
        self.calls_dir.mkdir(parents=True, exist_ok=True)
        body_file = self.calls_dir / f"{self.calls:04d}.json"
        answer: Any = exchange.answer if exchange.answer is not None else (exchange.stream or b"").decode(
            "utf-8", errors="replace")
        body_file.write_text(json.dumps({"endpoint": exchange.endpoint, "status": exchange.status,
                                         "request": exchange.request, "answer": answer}))
        text, tool_calls = said(exchange.fmt, exchange.answer, exchange.stream)
        usage = ModelUsage(model=self.gateway.upstream, input_tokens=exchange.tokens[0],
                           output_tokens=exchange.tokens[1], cost_usd=exchange.cost, wait_s=exchange.latency_s,
                           extra={"via": "gateway", "endpoint": exchange.endpoint, "status": exchange.status,
                                  "stream": exchange.stream is not None, "body_file": str(body_file),
                                  "price_known": self.price_known,
                                  **({"error": exchange.error} if exchange.error else {})})
        try:
            self.ctx.record_model_call(usage, text=text[:20_000], tool_calls=tool_calls, turn=self.calls)
        except LimitExceeded as exc:
            self.limit = exc
            self._refuse_more(str(exc))

    def _refused(self, why: str) -> None:
        """The request did not fit in what is left of the cost limit: the attempt ends as `limit` (cost)."""
        if self.limit is not None or self.ctx is None:
            return
        self.limit = LimitExceeded("cost", why)
        with contextlib.suppress(Exception):
            self.ctx.log_event("limit", which="cost", detail=why[:500])
        self._refuse_more(why)

    def _refuse_more(self, why: str) -> None:
        """Past a limit the agent's credit is closed: every later request gets 429."""
        assert self.server is not None
        self.server.meters["agent"].credit.limit_usd = -1.0  # nothing, not even a free request, fits

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
        self.remove_folder()

    def remove_folder(self) -> None:
        """Remove the socket's host folder. Again once the container is gone: the engine's archive API
        (snapshots) recreates a bind mount's missing source folder while the container exists."""
        shutil.rmtree(self.socket_dir, ignore_errors=True)
