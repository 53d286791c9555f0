"""One attempt's model gateway: a small OpenAI-compatible HTTP/1.1 server in the harness's event loop.

    client in the sandbox --(Bearer token)--> GatewayServer --> upstream (local model | provider)
                                                   |
                                                   +--> one gateway_requests row per request

It listens on 127.0.0.1:PORT (the local backend) or on a Unix socket that a root forwarder in the
container relays to (the Docker backend, rebench/sandbox/docker/forwarder.py). Three meters, each
with its own concurrency limit (rebench.gateway.meters): `agent` (the agent's code, its own token
and credit), `scorer` (its own token) and `subject` (per-call tokens for code a scoring call runs;
it spends the scorer's credit). A request is refused before it reaches the upstream when it breaks
HTTP or a size limit (400/413, rebench.gateway.http), its token is wrong (401), it names another
model (404), it has a field off the allow-list (400, rebench.gateway.policy), or its worst-case cost
does not fit in what is left of its credit (429); an upstream error or timeout becomes an HTTP
error, never a hang. Stdlib only (asyncio streams), so the harness needs no web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any

from rebench.environments.metadata import Gateway
from rebench.gateway.http import BadRequest, Head, declared_length, read_body, read_head, write_answer
from rebench.gateway.meters import Credit, Meter, new_token
from rebench.gateway.policy import PolicyError, parse_body, plan_request
from rebench.gateway.upstreams import Reply, Upstream, UpstreamError
from rebench.models.prices import ModelPrice
from rebench.store.db import Store
from rebench.store.models import GatewayRequest

UNAUTHORIZED_ROWS = 20
"""Requests without a valid token recorded one row each, per gateway; past them one summary row
counts the rest (updated every SUMMARY_EVERY and when the gateway closes), so a flood writes no rows."""
SUMMARY_EVERY = 100
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code
        self.deferred = False
        """Its row is written once the upstream ends (a 504 the upstream still works on)."""


@dataclass
class _Late:
    """A request the client was answered 504 for while the upstream still works on it."""

    meter: Meter
    reserved: float
    task: asyncio.Future[Reply]


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
        scorer_credit = Credit(gateway.scorer_credit_usd)
        self.meters = {
            "agent": Meter("agent", Credit(gateway.credit_usd if credit_usd is None else credit_usd),
                           gateway.concurrency),
            "scorer": Meter("scorer", scorer_credit, gateway.concurrency),
            "subject": Meter("subject", scorer_credit, gateway.concurrency, token=""),
        }
        self._call_tokens: set[str] = set()
        self._late: set[asyncio.Task[None]] = set()
        self._unauthorized = 0
        self._summary_row: int | None = None
        self._servers: list[asyncio.Server] = []
        self.resume_spending()
        self._connections: set[asyncio.StreamWriter] = set()
        self.port: int | None = None

    def use_tokens(self, tokens: dict[str, str]) -> None:
        """Take over the meters' tokens of an earlier gateway of this attempt (a human attempt's new
        supervisor: the sandbox's files and the expert's running code hold the old ones)."""
        for name, token in tokens.items():
            if name in ("agent", "scorer") and token:
                self.meters[name].token = token

    def open_call_token(self) -> str:
        """A fresh token on the `subject` meter, for one scoring call's code; `close_call_token` ends it."""
        token = new_token()
        self._call_tokens.add(token)
        return token

    def close_call_token(self, token: str) -> None:
        """New requests with `token` get 401; those already in flight finish and are charged."""
        self._call_tokens.discard(token)

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
                self.meters[name].charge(0.0, float(total or 0.0))

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
        if self._late:  # requests answered 504 that the upstream still works on: wait to charge them
            _, pending = await asyncio.wait(self._late, timeout=min(self.gateway.timeout_s, 60))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=10)
        await self._write_summary()
        with contextlib.suppress(Exception):
            await self.upstream.close()

    # -- HTTP ------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                started = time.monotonic()
                try:
                    head = await read_head(reader)
                except BadRequest as exc:  # no token known yet: counted as unauthorized
                    await self._refuse(writer, None, "", "(malformed)", started,
                                       HttpError(exc.status, str(exc), "invalid_request_error"))
                    return
                if head is None:
                    return
                if not await self._exchange(reader, writer, head, started):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._connections.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: Head,
                        started: float) -> bool:
        """Answer one request; False when the connection must close (its body was not read whole)."""
        meter = self._authenticate(head.headers)
        try:
            declared_length(head)
            if meter is None:
                raise HttpError(401, "invalid or missing gateway token: use OPENAI_API_KEY from api.env",
                                "authentication_error", "invalid_api_key")
            body = await read_body(reader, head)
        except BadRequest as exc:
            await self._refuse(writer, meter, "", head.path, started,
                               HttpError(exc.status, str(exc), "invalid_request_error"))
            return False
        except HttpError as exc:
            await self._refuse(writer, meter, "", head.path, started, exc)
            return False
        status, answer, extra = await self._respond(meter, head, body, started)
        await write_answer(writer, status, answer, extra, head.keep_alive)
        return head.keep_alive

    async def _refuse(self, writer: asyncio.StreamWriter, meter: Meter | None, model: str, path: str,
                      started: float, exc: HttpError) -> None:
        """Record and answer a refusal, then the connection closes."""
        await self._record(meter, model, path[:64], exc.status, started, error=str(exc))
        with contextlib.suppress(ConnectionError):
            await write_answer(writer, exc.status, self._error_body(exc), self._error_headers(exc), False)

    @staticmethod
    def _error_body(exc: HttpError) -> dict[str, Any]:
        return {"error": {"message": str(exc), "type": exc.kind, "code": exc.code, "param": None}}

    @staticmethod
    def _error_headers(exc: HttpError) -> dict[str, str]:
        return {} if exc.status >= 500 else {"x-should-retry": "false"}

    # -- the API ---------------------------------------------------------------
    async def _respond(self, meter: Meter, head: Head, body: bytes,
                       started: float) -> tuple[int, dict[str, Any], dict[str, str]]:
        method, path = head.method, head.path
        endpoint = path[:64]
        model = ""
        try:
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
            request = await self._parse(body)
            model = str(request.get("model", ""))[:128]
            reply, cost = await self._forward(meter, ENDPOINTS[path], request, endpoint, started)
        except HttpError as exc:
            if not exc.deferred:
                await self._record(meter, model, endpoint, exc.status, started, error=str(exc))
            return exc.status, self._error_body(exc), self._error_headers(exc)
        await self._record(meter, model, endpoint, 200, started, reply=reply, cost=cost)
        return 200, reply.body, {}

    def _authenticate(self, headers: dict[str, str]) -> Meter | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if not token and headers.get("x-api-key"):
            scheme, token = "bearer", headers["x-api-key"]
        if scheme.lower() != "bearer" or not token.strip():
            return None
        given = token.strip()
        for name in ("agent", "scorer"):
            if secrets.compare_digest(given, self.meters[name].token):
                return self.meters[name]
        for known in list(self._call_tokens):
            if secrets.compare_digest(given, known):
                return self.meters["subject"]
        return None

    @staticmethod
    async def _parse(body: bytes) -> dict[str, Any]:
        try:  # a big body is parsed in a thread, so the loop keeps serving other connections meanwhile
            return parse_body(body) if len(body) < 256 * 1024 else await asyncio.to_thread(parse_body, body)
        except PolicyError as exc:
            raise HttpError(exc.status, str(exc), "invalid_request_error", exc.code) from None

    async def _forward(self, meter: Meter, endpoint: str, request: dict[str, Any], path: str,
                       started: float) -> tuple[Reply, float]:
        """The upstream's reply and its cost, charged; HttpError otherwise (a 504's cost is charged later)."""
        allowed = self.gateway.model
        if request.get("model") != allowed:
            raise HttpError(404, f"model {request.get('model')!r} is not available through this gateway; "
                            f"the only model allowed is {allowed!r}", "invalid_request_error", "model_not_found")
        try:
            plan = plan_request(endpoint, request, self.gateway)
            worst = self.price.cost_usd(self.upstream.input_bound(endpoint, plan.body), plan.max_output_tokens)
        except PolicyError as exc:
            raise HttpError(exc.status, str(exc), "invalid_request_error", exc.code) from None
        except UpstreamError as exc:
            raise HttpError(exc.status, str(exc), exc.kind) from None
        await meter.slots.acquire()
        task: asyncio.Future[Reply] | None = None
        reserved = 0.0
        try:
            # Reserved once the request holds a slot, with no await in between: concurrent requests
            # cannot together reserve past the credit.
            if not meter.credit.reserve(worst):
                left = meter.credit.left_usd or 0.0
                raise HttpError(429, f"credit spent: the {meter.name} meter's credit has ${max(left, 0):.4f} of "
                                f"${meter.credit_usd or 0:.4f} left, and this request may cost up to ${worst:.4f} "
                                "(ask fewer max_tokens or n)", "insufficient_quota", "insufficient_quota")
            reserved = worst
            meter.requests += 1
            call = self.upstream.chat if endpoint == "chat" else self.upstream.completions
            task = asyncio.ensure_future(call(plan.body))
            meter.busy(+1)
            try:
                reply = await asyncio.wait_for(asyncio.shield(task), self.gateway.timeout_s)
            except UpstreamError as exc:
                raise HttpError(exc.status, str(exc), exc.kind) from None
            except TimeoutError:
                timed_out = HttpError(504, f"the upstream did not answer within {self.gateway.timeout_s:g} s",
                                      "timeout")
                timed_out.deferred = not task.done()
                raise timed_out from None
            except Exception as exc:
                raise HttpError(502, f"the upstream failed: {type(exc).__name__}: {exc}", "upstream_error") from None
            cost = self.price.cost_usd(reply.input_tokens, reply.output_tokens)
            meter.charge(reserved, cost)
            reserved = 0.0
            return reply, cost
        finally:
            if task is not None:
                meter.busy(-1)
            if task is None or task.done():
                meter.slots.release()
                meter.charge(reserved, 0.0)  # refused or failed: nothing to pay
            else:
                # A timed-out request runs on upstream (a local generate() in its thread, a provider's
                # HTTP call): it keeps its slot and its reservation until it ends, then is charged.
                late = asyncio.ensure_future(self._settle_late(_Late(meter, reserved, task), path, started))
                self._late.add(late)
                late.add_done_callback(self._late.discard)

    async def _settle_late(self, late: _Late, path: str, started: float) -> None:
        """Charge what a request answered 504 really cost and write its row then, with the tokens the
        upstream reports. When the gateway closes first, it is charged its reservation (the most it could
        cost); when the upstream fails, nothing."""
        reply: Reply | None = None
        try:
            reply = await late.task
            cost, note = self.price.cost_usd(reply.input_tokens, reply.output_tokens), "answered after it: charged"
        except asyncio.CancelledError:
            cost, note = late.reserved, "was still running when the gateway closed: charged its worst case"
        except Exception as exc:
            cost, note = 0.0, f"failed after it ({type(exc).__name__})"
        finally:
            late.meter.slots.release()
        late.meter.charge(late.reserved, cost)
        await self._record(late.meter, self.gateway.model, path, 504, started, reply=reply, cost=cost,
                           error=f"the upstream did not answer within {self.gateway.timeout_s:g} s, and {note}")

    async def _record(self, meter: Meter | None, model: str, endpoint: str, status: int, started: float, *,
                      reply: Reply | None = None, cost: float = 0.0, error: str | None = None) -> None:
        """One gateway_requests row. Without a valid token only the first UNAUTHORIZED_ROWS are rows;
        the rest are counted in one summary row."""
        if meter is None:
            self._unauthorized += 1
            if self._unauthorized > UNAUTHORIZED_ROWS:
                more = self._unauthorized - UNAUTHORIZED_ROWS
                if self._summary_row is None or more % SUMMARY_EVERY == 0:
                    await self._write_summary()
                return
        row = GatewayRequest(
            attempt_id=self.attempt_id, meter=meter.name if meter else "unauthorized", model=model,
            endpoint=endpoint, status=status, input_tokens=reply.input_tokens if reply else 0,
            output_tokens=reply.output_tokens if reply else 0, cost_usd=cost,
            latency_s=time.monotonic() - started, error=error[:2000] if error else None)
        await self._write(row)

    async def _write(self, row: GatewayRequest, update: int | None = None) -> int | None:
        """Add `row` (or copy its error onto row `update`); its id. A failed write never fails a request."""
        store = self.store
        if store is None:  # scoring outside an attempt (calibration): nothing to meter it against
            return None

        def write() -> int:
            with store.session() as session:
                if update is not None:
                    existing = session.get(GatewayRequest, update)
                    if existing is not None:
                        existing.error = row.error
                    return update
                session.add(row)
                session.flush()
                return int(row.id)

        with contextlib.suppress(Exception):
            return await asyncio.to_thread(write)
        return None

    async def _write_summary(self) -> None:
        more = self._unauthorized - UNAUTHORIZED_ROWS
        if more <= 0:
            return
        row = GatewayRequest(attempt_id=self.attempt_id, meter="unauthorized", model="", endpoint="(summary)",
                             status=401, error=f"{more} more requests without a valid token or with a malformed "
                             f"head after the first {UNAUTHORIZED_ROWS} (not recorded one by one)")
        self._summary_row = await self._write(row, update=self._summary_row)

