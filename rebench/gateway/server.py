"""One attempt's model gateway: a small OpenAI-compatible HTTP/1.1 server in the harness's event loop.

    client in the sandbox --(Bearer token)--> GatewayServer --> upstream (local model | provider)
                                                   |
                                                   +--> one gateway_requests row per request

It listens on 127.0.0.1:PORT (the local backend) or on a Unix socket that a root forwarder in the
container relays to (the Docker backend, rebench/sandbox/docker/forwarder.py). Two meters, each
with its own random token, credit and concurrency limit: `agent` (the agent's code) and `scorer`.
A request is refused before it reaches the upstream when its token is wrong (401), it names
another model (404), or its meter's credit is spent (429); an upstream error or timeout becomes
an HTTP error, never a hang. Stdlib only (asyncio streams), so the harness needs no web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rebench.environments.metadata import Gateway
from rebench.gateway.upstreams import Reply, Upstream, UpstreamError
from rebench.models.prices import ModelPrice
from rebench.store.db import Store
from rebench.store.models import GatewayRequest

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


@dataclass
class Meter:
    """Who pays for a request: its token, credit (None: unlimited), spending and concurrency."""

    name: str
    credit_usd: float | None
    concurrency: int
    token: str = field(default_factory=lambda: "rbgw-" + secrets.token_urlsafe(24))
    spent_usd: float = 0.0
    requests: int = 0
    in_flight: int = 0
    on_busy: Callable[[bool], None] | None = None
    """Told when the meter's first request starts (True) and its last one ends (False): the runner
    stops the attempt clock while the scorer waits on the model."""
    slots: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.slots = asyncio.Semaphore(self.concurrency)

    @property
    def credit_left(self) -> bool:
        return self.credit_usd is None or self.spent_usd < self.credit_usd

    def busy(self, change: int) -> None:
        self.in_flight += change
        if self.on_busy is not None and self.in_flight == (1 if change > 0 else 0):
            self.on_busy(change > 0)


class _TooLarge(Exception):
    pass


def _release_after(meter: Meter, done: asyncio.Future[Reply]) -> None:
    meter.slots.release()
    if not done.cancelled():
        done.exception()  # retrieved: nobody waits for a timed-out request's outcome


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code


class GatewayServer:
    """Serves one attempt; `start_tcp`/`start_unix`, then `close()` (idempotent). Without a store
    (scoring outside an attempt) requests are served and not recorded."""

    def __init__(self, gateway: Gateway, upstream: Upstream, *, store: Store | None, attempt_id: int,
                 price: ModelPrice, credit_usd: float | None = None) -> None:
        self.gateway = gateway
        self.upstream = upstream
        self.store = store
        self.attempt_id = attempt_id
        self.price = price
        self.meters = {
            "agent": Meter("agent", gateway.credit_usd if credit_usd is None else credit_usd, gateway.concurrency),
            "scorer": Meter("scorer", gateway.scorer_credit_usd, gateway.concurrency),
        }
        self._by_token = {m.token: m for m in self.meters.values()}
        self._servers: list[asyncio.Server] = []
        self.resume_spending()
        self._connections: set[asyncio.StreamWriter] = set()
        self.port: int | None = None

    def use_tokens(self, tokens: dict[str, str]) -> None:
        """Take over the meters' tokens of an earlier gateway of this attempt (a human attempt's new
        supervisor: the sandbox's files and the expert's running code hold the old ones)."""
        for name, token in tokens.items():
            if name in self.meters:
                self.meters[name].token = token
        self._by_token = {m.token: m for m in self.meters.values()}

    def resume_spending(self) -> None:
        """What this attempt's meters spent before (an earlier process's gateway): the credit goes on."""
        if self.store is None:
            return
        from sqlalchemy import func, select

        with self.store.session() as session:
            spent = session.execute(select(GatewayRequest.meter, func.sum(GatewayRequest.cost_usd))
                                    .where(GatewayRequest.attempt_id == self.attempt_id)
                                    .group_by(GatewayRequest.meter)).all()
        for name, total in spent:
            if name in self.meters:
                self.meters[name].spent_usd = float(total or 0.0)

    # -- lifecycle -------------------------------------------------------------
    async def start_tcp(self, host: str = "127.0.0.1", port: int = 0) -> int:
        server = await asyncio.start_server(self._serve, host, port)
        self._servers.append(server)
        self.port = int(server.sockets[0].getsockname()[1])
        return self.port

    async def start_unix(self, path: str) -> None:
        server = await asyncio.start_unix_server(self._serve, path)
        self._servers.append(server)
        os.chmod(path, 0o666)  # root in the container connects; the folder itself is root-only there

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._connections):
            writer.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        self._servers = []
        with contextlib.suppress(Exception):
            await self.upstream.close()

    # -- HTTP ------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                try:
                    request = await self._read_request(reader)
                except _TooLarge as exc:  # answered, then the connection closes (the rest is not read)
                    await self._write(writer, 413, {"error": {"message": str(exc), "type": "invalid_request_error",
                                                              "code": None, "param": None}}, {}, False)
                    return
                if request is None:
                    return
                method, path, headers, body = request
                status, answer, extra = await self._respond(method, path, headers, body)
                keep = headers.get("connection", "").lower() != "close"
                await self._write(writer, status, answer, extra, keep)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            return
        finally:
            self._connections.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _read_request(self, reader: asyncio.StreamReader
                            ) -> tuple[str, str, dict[str, str], bytes] | None:
        line = await reader.readline()
        if not line:
            return None
        method, path, _version = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        size = 0
        while True:
            raw = await reader.readline()
            size += len(raw)
            if size > MAX_HEADER_BYTES:
                raise ValueError("headers too large")
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                length = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if length == 0:
                    await reader.readline()
                    break
                body += await reader.readexactly(length)
                await reader.readexactly(2)
                if len(body) > MAX_BODY_BYTES:
                    raise _TooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
        else:
            length = int(headers.get("content-length") or 0)
            if length > MAX_BODY_BYTES:
                raise _TooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
            body = await reader.readexactly(length) if length else b""
        return method.upper(), path.split("?", 1)[0], headers, body

    async def _write(self, writer: asyncio.StreamWriter, status: int, answer: dict[str, Any],
                     extra: dict[str, str], keep: bool) -> None:
        data = json.dumps(answer).encode()
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", "Content-Type: application/json",
                f"Content-Length: {len(data)}", f"Connection: {'keep-alive' if keep else 'close'}",
                *(f"{k}: {v}" for k, v in extra.items())]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await writer.drain()

    # -- the API ---------------------------------------------------------------
    async def _respond(self, method: str, path: str, headers: dict[str, str],
                       body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        started = time.monotonic()
        meter: Meter | None = None
        endpoint = path[:64]
        model = ""
        try:
            meter = self._authenticate(headers)
            if path in ("/v1/models", "/v1/models/" + self.gateway.model):
                if method != "GET":
                    raise HttpError(405, f"{path} takes GET", "invalid_request_error")
                entry = {"id": self.gateway.model, "object": "model", "created": 0, "owned_by": "rebench-gateway"}
                return 200, (entry if path != "/v1/models" else {"object": "list", "data": [entry]}), {}
            if path not in ENDPOINTS:
                raise HttpError(404, f"no endpoint {path}; this gateway serves /v1/chat/completions, "
                                "/v1/completions and /v1/models", "invalid_request_error")
            if method != "POST":
                raise HttpError(405, f"{path} takes POST", "invalid_request_error")
            request = self._parse(body)
            model = str(request.get("model", ""))[:128]
            reply = await self._forward(meter, ENDPOINTS[path], request)
        except HttpError as exc:
            await self._record(meter, model, endpoint, exc.status, started, error=str(exc))
            extra = {} if exc.status >= 500 else {"x-should-retry": "false"}
            return exc.status, {"error": {"message": str(exc), "type": exc.kind, "code": exc.code,
                                          "param": None}}, extra
        cost = self.price.cost_usd(reply.input_tokens, reply.output_tokens)
        meter.spent_usd += cost
        await self._record(meter, model, endpoint, 200, started, reply=reply, cost=cost)
        return 200, reply.body, {}

    def _authenticate(self, headers: dict[str, str]) -> Meter:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if not token and headers.get("x-api-key"):
            scheme, token = "bearer", headers["x-api-key"]
        for known, meter in self._by_token.items():
            if scheme.lower() == "bearer" and secrets.compare_digest(token.strip(), known):
                return meter
        raise HttpError(401, "invalid or missing gateway token: use OPENAI_API_KEY from api.env",
                        "authentication_error", "invalid_api_key")

    @staticmethod
    def _parse(body: bytes) -> dict[str, Any]:
        try:
            request = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError):
            raise HttpError(400, "the request body is not JSON", "invalid_request_error") from None
        if not isinstance(request, dict):
            raise HttpError(400, "the request body must be a JSON object", "invalid_request_error")
        return request

    async def _forward(self, meter: Meter, endpoint: str, request: dict[str, Any]) -> Reply:
        allowed = self.gateway.model
        if request.get("model") != allowed:
            raise HttpError(404, f"model {request.get('model')!r} is not available through this gateway; "
                            f"the only model allowed is {allowed!r}", "invalid_request_error", "model_not_found")
        if request.get("stream"):
            raise HttpError(400, "streaming is not supported by this gateway; send stream=false",
                            "invalid_request_error")
        await meter.slots.acquire()
        task: asyncio.Future[Reply] | None = None
        try:
            # Checked once the request holds a slot: what ran before it has been paid for.
            if not meter.credit_left:
                raise HttpError(429, f"credit spent: the {meter.name} meter used ${meter.spent_usd:.4f} of its "
                                f"${meter.credit_usd:.4f} credit", "insufficient_quota", "insufficient_quota")
            meter.requests += 1
            call = self.upstream.chat if endpoint == "chat" else self.upstream.completions
            task = asyncio.ensure_future(call(request))
            meter.busy(+1)
            try:
                return await asyncio.wait_for(asyncio.shield(task), self.gateway.timeout_s)
            except UpstreamError as exc:
                raise HttpError(exc.status, str(exc), exc.kind) from None
            except TimeoutError:
                raise HttpError(504, f"the upstream did not answer within {self.gateway.timeout_s:g} s",
                                "timeout") from None
            except Exception as exc:
                raise HttpError(502, f"the upstream failed: {type(exc).__name__}: {exc}", "upstream_error") from None
        finally:
            if task is not None:
                meter.busy(-1)
            if task is None or task.done():
                meter.slots.release()
            else:
                # A timed-out local generate() runs on in its thread: it keeps its slot until it ends, so
                # timed-out requests cannot pile up more work than the concurrency limit allows.
                task.add_done_callback(lambda done: _release_after(meter, done))

    async def _record(self, meter: Meter | None, model: str, endpoint: str, status: int, started: float, *,
                      reply: Reply | None = None, cost: float = 0.0, error: str | None = None) -> None:
        row = GatewayRequest(
            attempt_id=self.attempt_id, meter=meter.name if meter else "unauthorized", model=model,
            endpoint=endpoint, status=status, input_tokens=reply.input_tokens if reply else 0,
            output_tokens=reply.output_tokens if reply else 0, cost_usd=cost,
            latency_s=time.monotonic() - started, error=error[:2000] if error else None)

        store = self.store
        if store is None:  # scoring outside an attempt (calibration): nothing to meter it against
            return

        def write() -> None:
            with store.session() as session:
                session.add(row)

        with contextlib.suppress(Exception):  # a failed write must not fail the request it meters
            await asyncio.to_thread(write)
