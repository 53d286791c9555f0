"""Streamed requests: each one's upstream events pumped by a task of its own into a queue that the
response drains, so the request's accounting (its slot, its reservation settled, its row) happens in
the pump whatever becomes of the client's connection.

A stream ends complete (the upstream's own last event: charged the usage that event reports) or cut,
with the error event of the caller's API (rebench.gateway.formats): by an upstream error or a broken
connection (502), by the upstream sending nothing for `timeout_s` (504), or by the gateway closing when
the attempt ends (503). A cut stream is charged its reservation, the most it could have cost (its real
usage never came); so is one whose client went away (row status 499), and its upstream is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import httpx2
from starlette.responses import StreamingResponse

from rebench.environments.metadata import Gateway
from rebench.gateway.formats import HttpError
from rebench.gateway.meters import Meter
from rebench.gateway.route import Route
from rebench.gateway.streams import Relay, UpstreamStreamError
from rebench.gateway.transcript import Exchange
from rebench.gateway.upstreams import Reply, Upstream, UpstreamStream
from rebench.models.prices import ModelPrice

OBSERVED_BYTES = 16 * 1024 * 1024
"""A stream's events kept for the observer (the flight recorder), at most."""
CLIENT_GONE = 499
"""A stream's row status when its client left before the end (nginx's "client closed request")."""


T = TypeVar("T")


class RelayHost(Protocol):
    """What the streams need of their gateway (rebench.gateway.server.GatewayServer, which owns them)."""

    gateway: Gateway
    upstream: Upstream
    price: ModelPrice
    observer: Callable[[Exchange], None] | None

    async def open_call(self, meter: Meter, worst: float, call: Callable[[], Awaitable[T]], path: str,
                        started: float, settle: Callable[[asyncio.Future[T]], Awaitable[Reply]]) -> T: ...

    def finish(self, meter: Meter, reserved: float, cost: float) -> None: ...

    def record(self, meter: Meter | None, model: str, endpoint: str, status: int, started: float, *,
               tokens: tuple[int, int] = (0, 0), cost: float = 0.0, error: str | None = None) -> None: ...


class _Flow:
    """One stream in flight; `reason` says why its pump was cancelled (None: it was not)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.request: dict[str, Any] | None = None
        """The caller's request, kept only when the server has an observer (with `sent`: what it got)."""
        self.fmt = ""
        self.sent = bytearray()


async def _drained(task: asyncio.Future[UpstreamStream], fmt: str) -> Reply:
    """A stream opened after its request was answered 504, read to its end for the usage it reports."""
    stream = await task
    relay = Relay(fmt, fmt, True)
    try:
        async for name, data in stream.events():
            relay.feed(name, data)
    finally:
        await stream.aclose()
    if not relay.complete or relay.usage is None:
        raise RuntimeError("the stream ended before its usage")
    return Reply(body={}, input_tokens=relay.usage[0], output_tokens=relay.usage[1])


class Relaying:
    """The streams of one gateway."""

    def __init__(self, server: RelayHost) -> None:
        self.server = server
        self.flows: dict[asyncio.Task[None], _Flow] = {}
        self.closing = False

    async def start(self, meter: Meter, route: Route, include_usage: bool, worst: float, endpoint: str, model: str,
                    started: float, request: dict[str, Any] | None = None) -> StreamingResponse:
        """Open the upstream's stream (refusals and errors before its first event are HTTP errors) and
        answer with the stream."""
        if self.closing:
            raise HttpError(503, "the gateway is closing: the attempt ended", "api_error")
        server = self.server

        def settle(task: asyncio.Future[UpstreamStream]) -> asyncio.Future[Reply]:
            return asyncio.ensure_future(_drained(task, route.upstream))

        stream = await server.open_call(meter, worst, lambda: server.upstream.stream(route.upstream, route.body),
                                        endpoint, started, settle)
        relay = Relay(route.upstream, route.client, include_usage)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        flow = _Flow()
        flow.request = request
        flow.fmt = route.client
        pump = asyncio.ensure_future(self._pump(flow, relay, stream, queue, meter, worst, endpoint, model, started))
        self.flows[pump] = flow
        pump.add_done_callback(lambda done: self.flows.pop(done, None))
        return StreamingResponse(self._drain(queue, pump, flow), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    async def _pump(self, flow: _Flow, relay: Relay, stream: UpstreamStream, queue: asyncio.Queue[bytes | None],
                    meter: Meter, worst: float, endpoint: str, model: str, started: float) -> None:
        timeout = self.server.gateway.timeout_s
        error: tuple[int, str, str] | None = None
        try:
            async for name, data in stream.events():
                out = relay.feed(name, data)
                if out:
                    queue.put_nowait(out)
                    if flow.request is not None and len(flow.sent) < OBSERVED_BYTES:
                        flow.sent += out
            if relay.complete:
                last = relay.end()
                queue.put_nowait(last)
                if flow.request is not None and last:
                    flow.sent += last
            else:
                error = 502, "the upstream's stream ended before its last event", "upstream_error"
        except asyncio.CancelledError:
            error = ((503, "the gateway closed the stream: the attempt ended", "api_error") if flow.reason == "closing"
                     else (CLIENT_GONE, "the client went away before the stream ended", "client_gone"))
        except UpstreamStreamError as exc:
            error = 502, f"the upstream's stream reported an error: {exc}", "upstream_error"
        except httpx2.TimeoutException:
            error = 504, f"the upstream sent nothing for {timeout:g} s", "timeout"
        except Exception as exc:
            error = 502, f"the upstream's stream broke: {type(exc).__name__}: {exc}", "upstream_error"
        finally:
            if error is not None:
                queue.put_nowait(relay.cut(*error))
            queue.put_nowait(None)
            complete = error is None and relay.usage is not None
            usage = relay.usage or (0, 0)
            cost = self.server.price.cost_usd(*usage) if complete else worst
            self.server.finish(meter, worst, cost)
            note = None if error is None else f"{error[1]}: charged its reservation, the most it could cost"
            self.server.record(meter, model, endpoint, 200 if error is None else error[0], started, tokens=usage,
                               cost=cost, error=note)
            observer = self.server.observer
            if observer is not None and flow.request is not None:
                with contextlib.suppress(Exception):  # the recorder never breaks a stream's accounting
                    observer(Exchange(meter.name, flow.fmt, endpoint, model, flow.request, None, bytes(flow.sent),
                                      200 if error is None else error[0], usage, cost,
                                      time.monotonic() - started, note))
        with contextlib.suppress(BaseException):
            await stream.aclose()

    async def _drain(self, queue: asyncio.Queue[bytes | None], pump: asyncio.Task[None],
                     flow: _Flow) -> AsyncIterator[bytes]:
        """What the pump queued, sent on as it comes (all that is waiting in one write)."""
        ended = False
        try:
            while not ended:
                parts = [await queue.get()]
                while not queue.empty():
                    parts.append(queue.get_nowait())
                ended = parts[-1] is None
                data = b"".join(part for part in parts if part)
                if data:
                    yield data
        finally:
            if not ended:
                self._cut(pump, flow, "client")

    @staticmethod
    def _cut(pump: asyncio.Task[None], flow: _Flow, reason: str) -> None:
        if flow.reason is None and not pump.done():
            flow.reason = reason
            pump.cancel()

    def cut_all(self) -> None:
        """The gateway closes: every stream ends with an error event."""
        self.closing = True
        for pump, flow in list(self.flows.items()):
            self._cut(pump, flow, "closing")

    async def wait(self) -> None:
        if self.flows:
            await asyncio.wait(list(self.flows), timeout=10)
