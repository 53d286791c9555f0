"""The gateway's HTTP server: uvicorn (with httptools' parser) running an ASGI app in the harness's own
event loop, on a TCP port (local backend) or a Unix socket (a container's forwarder relays to it).

Uvicorn parses HTTP; what this module adds are the limits the agent must not get around: the request
line and headers are counted as the parser hands them over (over MAX_HEADER_BYTES or MAX_HEADERS: the
request is refused), a request the parser rejects is reported to the gateway (it becomes a row) before
uvicorn answers it 400 and closes the connection, and `read_body` reads a body under a size limit and
an idle limit. The harness owns the process's signals: the server installs no handler of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Generator
from typing import Any

import uvicorn
from starlette.requests import Request
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100
BODY_IDLE_S = 30.0
"""A request body that stops arriving for this long is answered 408 and its connection closed."""
KEEP_ALIVE_S = 75.0
"""An idle connection is kept this long (the SDKs pool theirs), as common proxies do."""
GRACE_S = 2.0
"""On close, requests still answering after this long are cancelled."""

LOG = logging.getLogger("rebench.gateway.http")
LOG.addHandler(logging.NullHandler())
LOG.propagate = False  # what the parser rejects is a row (Malformed), not a line on the operator's console
Malformed = Callable[[list[tuple[bytes, bytes]], str, str], None]
"""Told of a request the parser rejected: its headers read so far, its path (or "(malformed)"), why."""


class BodyError(Exception):
    """The body broke a limit: answered with `status`, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_length(request: Request, limit: int = MAX_BODY_BYTES) -> None:
    """BodyError 413 when the declared Content-Length is over `limit` (checked before anything else)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"the request body is over {limit} bytes")


async def read_body(request: Request, limit: int = MAX_BODY_BYTES, idle_s: float = BODY_IDLE_S) -> bytes:
    """The body, whole (in linear time: uvicorn hands it over in pieces, kept in one bytearray);
    BodyError 413 past `limit` (at once for a declared Content-Length, else as soon as the bytes pass
    it) or 408 when no byte came for `idle_s`. Starlette's ClientDisconnect when the client left."""
    check_length(request, limit)
    body = bytearray()
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(idle_s) as deadline:
            async for piece in request.stream():
                body += piece
                if len(body) > limit:
                    raise BodyError(413, f"the request body is over {limit} bytes")
                deadline.reschedule(loop.time() + idle_s)
    except TimeoutError:
        raise BodyError(408, f"the request body stopped arriving for {idle_s:g} s") from None
    return bytes(body)


class _HeadTooBig(Exception):
    pass


def protocol_class(on_malformed: Malformed) -> type[HttpToolsProtocol]:
    """Uvicorn's httptools protocol with the head limits, reporting what the parser rejects."""

    class GatewayProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.logger = LOG  # a malformed request is a row, not a warning on the operator's console
            self._head_bytes = 0
            self._head_count = 0
            self._too_big: str | None = None

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_bytes, self._head_count = 0, 0

        def _count(self, size: int, header: bool) -> None:
            self._head_bytes += size
            self._head_count += header
            if self._head_bytes > MAX_HEADER_BYTES:
                self._too_big = f"the request's line and headers are over {MAX_HEADER_BYTES} bytes"
            elif self._head_count > MAX_HEADERS:
                self._too_big = f"the request has over {MAX_HEADERS} headers"
            if self._too_big:
                raise _HeadTooBig(self._too_big)  # the parser stops: send_400_response follows

        def on_url(self, url: bytes) -> None:
            self._count(len(url), False)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4, True)
            super().on_header(name, value)

        def send_400_response(self, msg: str) -> None:
            why = self._too_big or ("the request is not valid HTTP/1.1 (its request line, a header or its "
                                    "chunked framing)")
            scope = self.scope or {}
            with contextlib.suppress(Exception):
                on_malformed(list(self.headers or []), str(scope.get("path") or "(malformed)"), why)
            super().send_400_response(why)

    return GatewayProtocol


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the harness's signal handlers stay in place


class HttpServer:
    """One listening socket served by uvicorn until `close()`."""

    def __init__(self, app: Any, on_malformed: Malformed) -> None:
        config = uvicorn.Config(app, http=protocol_class(on_malformed), lifespan="off", ws="none",
                                log_config=None, access_log=False, proxy_headers=False, server_header=False,
                                date_header=False, timeout_keep_alive=int(KEEP_ALIVE_S),
                                timeout_graceful_shutdown=int(GRACE_S), interface="asgi3")
        self.server = _Server(config)
        self.task: asyncio.Task[None] | None = None

    async def serve(self, sock: socket.socket) -> None:
        self.task = asyncio.ensure_future(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self.task.done():
                self.task.result()
                raise RuntimeError("the gateway's HTTP server stopped while starting")
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        if self.task is None:
            return
        self.server.should_exit = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(GRACE_S + 5):
                await asyncio.shield(self.task)
        if not self.task.done():
            self.task.cancel()


def tcp_socket(host: str, port: int) -> socket.socket:
    # proto given: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets that say they are TCP,
    # and a reply's head and body written apart would otherwise wait ~40 ms for the client's delayed ACK
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def unix_socket(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o666)  # root in the container connects; the folder itself is root-only there
    sock.setblocking(False)
    return sock
