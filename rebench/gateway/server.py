"""One attempt's model gateway: an ASGI app (Starlette's requests and responses) served by uvicorn in the
harness's event loop (rebench.gateway.serving).

    client in the sandbox --(token)--> GatewayServer --> upstream (local model | provider)
                                            |
                                            +--> one gateway_requests row per request

It serves OpenAI's Chat Completions, Completions and Responses and Anthropic's Messages (with
count_tokens), streamed or not, translating between the two providers' formats when the upstream
speaks the other (rebench.gateway.route). Three meters, each with its own concurrency limit
(rebench.gateway.meters): `agent` (its own token and credit), `scorer` (its own token) and `subject`
(per-call tokens for code a scoring call runs; it spends the scorer's credit). A request is refused
before it reaches the upstream when it breaks HTTP or a size limit (400/408/413), its token is wrong
(401), it names another model (404), it has a field off the allow-list or one that cannot be
translated (400, rebench.gateway.policy), or its worst-case cost does not fit in what is left of its
credit (429); an upstream error or timeout becomes an HTTP error (or, once a stream began, an error
event; rebench.gateway.relaying), never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from rebench.environments.metadata import Gateway
from rebench.gateway.content import check_content
from rebench.gateway.formats import ENDPOINTS, HttpError, error_body
from rebench.gateway.meters import Credit, Meter, new_token
from rebench.gateway.policy import PolicyError, allowed_betas, parse_body, plan_request
from rebench.gateway.records import Records
from rebench.gateway.relaying import Relaying
from rebench.gateway.route import convert_reply, make_route
from rebench.gateway.serving import (
    BODY_IDLE_S,
    BodyError,
    HttpServer,
    check_length,
    read_body,
    tcp_socket,
    unix_socket,
)
from rebench.gateway.transcript import Exchange
from rebench.gateway.upstream_http import ANTHROPIC_BETA
from rebench.gateway.upstreams import Reply, Upstream, UpstreamError
from rebench.models.prices import ModelPrice
from rebench.store.db import Store
from rebench.store.models import GatewayRequest

T = TypeVar("T")
ANTHROPIC_FORMATS = ("messages", "count_tokens")
"""Requests whose `anthropic-beta` header is passed on (cut to the allowed flags)."""


@dataclass
class _Late:
    """A request the client was answered 504 for while the upstream still works on it."""

    meter: Meter
    reserved: float
    task: asyncio.Future[Reply]


class GatewayServer:
    """Serves one attempt; `start_tcp`/`start_unix`, then `close()` (idempotent). Without a store
    (scoring outside an attempt) requests are served and not recorded."""

    row_meters: ClassVar[Mapping[str, str]] = {}
    """The name a meter's rows take in gateway_requests, where it differs from the meter's own."""

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
        self.records = Records(store, attempt_id)
        self.relaying = Relaying(self)
        self.body_idle_s = BODY_IDLE_S
        self._call_tokens: set[str] = set()
        self._late: set[asyncio.Task[None]] = set()
        self._http: list[HttpServer] = []
        self.port: int | None = None
        self.observer: Callable[[Exchange], None] | None = None
        """Told of every answered request with its bodies (an installed agent's flight recorder)."""
        self.resume_spending()

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
        sock = tcp_socket(host, port)
        self.port = int(sock.getsockname()[1])
        await self._serve(sock)
        return self.port

    async def start_unix(self, path: str) -> None:
        await self._serve(unix_socket(path))

    async def _serve(self, sock: Any) -> None:
        server = HttpServer(self, self._malformed)
        self._http.append(server)
        await server.serve(sock)

    async def close(self) -> None:
        """Streams in flight end with an error event; then the server stops, requests answered 504 that
        the upstream still works on are awaited (up to timeout_s, at most 60 s) and every row is written."""
        self.relaying.cut_all()
        for server in self._http:
            await server.close()
        self._http = []
        await self.relaying.wait()
        if self._late:
            _, pending = await asyncio.wait(self._late, timeout=min(self.gateway.timeout_s, 60))
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=10)
        await self.records.flush()
        with contextlib.suppress(Exception):
            await self.upstream.close()

    # -- HTTP ------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        response = await self._handle(Request(scope, receive))
        await response(scope, receive, send)

    async def _handle(self, request: Request) -> Response:
        started = time.monotonic()
        path = request.url.path
        endpoint, fmt = path[:64], ENDPOINTS.get(path, "chat")
        meter = self._authenticate(request.headers)
        model = ""
        try:
            try:
                check_length(request)
            except BodyError as exc:
                raise _closing(HttpError(exc.status, str(exc), "invalid_request_error")) from None
            if meter is None:
                raise _closing(HttpError(401, "invalid or missing gateway token: use OPENAI_API_KEY from api.env",
                                         "authentication_error", "invalid_api_key"))
            if path in ("/v1/models", "/v1/models/" + self.gateway.model):
                return self._models(request, path)
            if path not in ENDPOINTS:
                raise HttpError(404, f"no endpoint {path}; this gateway serves {', '.join(ENDPOINTS)} and /v1/models",
                                "invalid_request_error")
            if request.method != "POST":
                raise HttpError(405, f"{path} takes POST", "invalid_request_error")
            try:
                body = await read_body(request, idle_s=self.body_idle_s)
            except BodyError as exc:
                raise _closing(HttpError(exc.status, str(exc), "invalid_request_error")) from None
            parsed = await self._parse(body)
            model = str(parsed.get("model", ""))[:128]
            ANTHROPIC_BETA.set(self._betas(request.headers.get("anthropic-beta")) if fmt in ANTHROPIC_FORMATS
                               else None)
            return await self._answer(meter, fmt, parsed, endpoint, model, started)
        except ClientDisconnect:  # gone while sending its body: nothing to answer, no row (as before)
            return Response(status_code=400, headers={"connection": "close"})
        except HttpError as exc:
            if not exc.deferred:
                self.record(meter, model, endpoint, exc.status, started, error=str(exc))
            return self.error_response(fmt, exc)

    def _models(self, request: Request, path: str) -> Response:
        if request.method != "GET":
            raise HttpError(405, f"{path} takes GET", "invalid_request_error")
        entry = {"id": self.gateway.model, "object": "model", "created": 0, "owned_by": "rebench-gateway"}
        return JSONResponse(entry if path != "/v1/models" else {"object": "list", "data": [entry]})

    @staticmethod
    def error_response(fmt: str, exc: HttpError) -> Response:
        headers = {} if exc.status >= 500 else {"x-should-retry": "false"}
        if exc.close:
            headers["connection"] = "close"
        return JSONResponse(error_body(fmt, exc.status, str(exc), exc.kind, exc.code), exc.status, headers)

    def _authenticate(self, headers: Mapping[str, str]) -> Meter | None:
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

    def _malformed(self, headers: list[tuple[bytes, bytes]], path: str, why: str) -> None:
        """A request the HTTP parser rejected (uvicorn answers it 400 and closes): its row."""
        seen = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in headers}
        self.record(self._authenticate(seen), "", path[:64], 400, time.monotonic(), error=why)

    @staticmethod
    async def _parse(body: bytes) -> dict[str, Any]:
        try:  # a big body is parsed in a thread, so the loop keeps serving other connections meanwhile
            return parse_body(body) if len(body) < 256 * 1024 else await asyncio.to_thread(parse_body, body)
        except PolicyError as exc:
            raise HttpError(exc.status, str(exc), "invalid_request_error", exc.code) from None

    @staticmethod
    def _betas(header: str | None) -> str | None:
        try:
            return allowed_betas(header)
        except PolicyError as exc:
            raise HttpError(exc.status, str(exc), "invalid_request_error", exc.code) from None

    # -- the API ---------------------------------------------------------------
    async def _answer(self, meter: Meter, fmt: str, request: dict[str, Any], endpoint: str, model: str,
                      started: float) -> Response:
        allowed = self.gateway.model
        if request.get("model") != allowed:
            raise HttpError(404, f"model {request.get('model')!r} is not available through this gateway; "
                            f"the only model allowed is {allowed!r}", "invalid_request_error", "model_not_found")
        try:
            plan = plan_request(fmt, request, self.gateway)
            check_content(fmt, plan.body)  # nothing the provider would fetch or read from storage
            if fmt == "count_tokens":
                return await self._count_tokens(meter, plan.body, endpoint, model, started)
            route = make_route(fmt, plan.body, self.upstream)
            worst = self.price.cost_usd(self.upstream.input_bound(route.upstream, route.body), plan.max_output_tokens)
        except PolicyError as exc:
            raise HttpError(exc.status, str(exc), "invalid_request_error", exc.code) from None
        except UpstreamError as exc:
            raise HttpError(exc.status, str(exc), exc.kind) from None
        if plan.stream:
            return await self.relaying.start(meter, route, plan.include_usage, worst, endpoint, model, started,
                                             request=request if self.observer is not None else None)
        reply = await self.open_call(meter, worst, lambda: self.upstream.call(route.upstream, route.body), endpoint,
                                     started, _result)
        cost = self.price.cost_usd(reply.input_tokens, reply.output_tokens)
        self.finish(meter, worst, cost)
        self.record(meter, model, endpoint, 200, started, tokens=(reply.input_tokens, reply.output_tokens), cost=cost)
        answer = convert_reply(route, reply.body)
        if self.observer is not None:
            self.observer(Exchange(meter.name, fmt, endpoint, model, request, answer, None, 200,
                                   (reply.input_tokens, reply.output_tokens), cost, time.monotonic() - started))
        return JSONResponse(answer)

    async def _count_tokens(self, meter: Meter, body: dict[str, Any], endpoint: str, model: str,
                            started: float) -> Response:
        """Anthropic's count_tokens: free, but it holds a slot (the operator's provider limits its rate)."""
        async with meter.slots:
            try:
                async with asyncio.timeout(self.gateway.timeout_s):
                    tokens = await self.upstream.count_tokens(body)
            except UpstreamError as exc:
                raise HttpError(exc.status, str(exc), exc.kind) from None
            except TimeoutError:
                raise HttpError(504, f"the upstream did not answer within {self.gateway.timeout_s:g} s",
                                "timeout") from None
        self.record(meter, model, endpoint, 200, started, tokens=(tokens, 0))
        return JSONResponse({"input_tokens": tokens})

    def refuse_credit(self, meter: Meter, worst: float) -> HttpError:
        left = meter.credit.left_usd or 0.0
        return HttpError(429, f"credit spent: the {meter.name} meter's credit has ${max(left, 0):.4f} of "
                         f"${meter.credit_usd or 0:.4f} left, and this request may cost up to ${worst:.4f} "
                         "(ask fewer max_tokens or n)", "insufficient_quota", "insufficient_quota")

    async def open_call(self, meter: Meter, worst: float, call: Callable[[], Awaitable[T]], path: str,
                        started: float, settle: Callable[[asyncio.Future[T]], Awaitable[Reply]]) -> T:
        """Take a slot, reserve `worst` and make `call` under the timeout. Its result comes back still
        holding the slot and the reservation (end them with `finish`); an HttpError otherwise. A call
        that outlives its 504 keeps both until `settle` (its result -> the Reply to charge) ends."""
        await meter.slots.acquire()
        # Reserved once the request holds a slot, with no await in between: concurrent requests
        # cannot together reserve past the credit.
        if not meter.credit.reserve(worst):
            meter.slots.release()
            raise self.refuse_credit(meter, worst)
        meter.requests += 1
        meter.busy(+1)
        task = asyncio.ensure_future(call())
        answered = False
        try:
            async with asyncio.timeout(self.gateway.timeout_s):
                result = await asyncio.shield(task)
            answered = True
            return result
        except UpstreamError as exc:
            raise HttpError(exc.status, str(exc), exc.kind) from None
        except TimeoutError:
            timed_out = HttpError(504, f"the upstream did not answer within {self.gateway.timeout_s:g} s", "timeout")
            timed_out.deferred = not task.done()
            raise timed_out from None
        except Exception as exc:
            raise HttpError(502, f"the upstream failed: {type(exc).__name__}: {exc}", "upstream_error") from None
        finally:
            if not answered:
                meter.busy(-1)
                if task.done() and (task.cancelled() or task.exception() is not None):
                    meter.slots.release()
                    meter.charge(worst, 0.0)  # refused or failed: nothing to pay
                else:
                    # A timed-out request runs on upstream (a local generate() in its thread, a provider's
                    # HTTP call): it keeps its slot and its reservation until it ends, then is charged.
                    late = asyncio.ensure_future(self._settle_late(
                        _Late(meter, worst, asyncio.ensure_future(settle(task))), path, started))
                    self._late.add(late)
                    late.add_done_callback(self._late.discard)

    @staticmethod
    def finish(meter: Meter, reserved: float, cost: float) -> None:
        """A call that `open_call` returned has ended: its slot back, its reservation replaced by `cost`."""
        meter.busy(-1)
        meter.slots.release()
        meter.charge(reserved, cost)

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
        self.record(late.meter, self.gateway.model, path, 504, started, cost=cost,
                     tokens=(reply.input_tokens, reply.output_tokens) if reply else (0, 0),
                     error=f"the upstream did not answer within {self.gateway.timeout_s:g} s, and {note}")

    def record(self, meter: Meter | None, model: str, endpoint: str, status: int, started: float, *,
                tokens: tuple[int, int] = (0, 0), cost: float = 0.0, error: str | None = None) -> None:
        """One gateway_requests row, written off the request's path (rebench.gateway.records)."""
        if self.store is None:  # scoring outside an attempt (calibration): nothing to meter it against
            return
        self.records.add(GatewayRequest(
            attempt_id=self.attempt_id, meter=self.row_meters.get(meter.name, meter.name) if meter else "unauthorized",
            model=model,
            endpoint=endpoint, status=status, input_tokens=tokens[0], output_tokens=tokens[1], cost_usd=cost,
            latency_s=time.monotonic() - started, error=error[:2000] if error else None))


async def _result(task: asyncio.Future[Reply]) -> Reply:
    return await task


def _closing(exc: HttpError) -> HttpError:
    """`exc`, answered with the connection closed (the request's body was not read whole)."""
    exc.close = True
    return exc
