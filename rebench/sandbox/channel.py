"""The harness side of the exec server's channel (see exec_server.py).

The channel is the attached stdin/stdout of the container's main process, a raw
socket handed over by the Docker SDK. Docker multiplexes stdout and stderr on it
(8-byte headers: stream id, 3 zero bytes, big-endian length); stdout carries the
server's reply frames, stderr its own diagnostics, which we keep for errors.
Many requests may be in flight at once; replies are matched by id. A keep-alive
container's server also sends unsolicited frames (`"event"`, e.g. a `task` request
from inside the sandbox); they go to `on_event`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import struct
from collections.abc import Callable
from typing import Any

from rebench.errors import SandboxDied, SandboxStartError
from rebench.sandbox.output import join_cut

_MUX_HEADER = struct.Struct(">BxxxI")
_FRAME_HEADER = struct.Struct(">I")


def decode_capture(capture: dict[str, Any]) -> tuple[str, bool]:
    """Rebuild a capped stream from the server's head/tail pieces, with the usual marker."""
    head = base64.b64decode(capture.get("head", ""))
    tail = base64.b64decode(capture.get("tail", ""))
    return join_cut(head, tail, int(capture.get("dropped", 0)))


class ExecChannel:
    """Request/reply over one attached container stream."""

    def __init__(self, sock: socket.socket, *, multiplexed: bool = True) -> None:
        self._sock = sock
        self._multiplexed = multiplexed
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_id = 1
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self.diagnostics = bytearray()
        self.closed_reason: str | None = None
        self.on_event: Callable[[dict[str, Any]], None] | None = None
        """Called (in the reading task: it must not block) with each unsolicited frame."""

    async def open(self, bootstrap: bytes = b"", timeout: float = 10.0) -> dict[str, Any]:
        """Start reading, send `bootstrap` (the server's source for the loader), wait for its hello."""
        loop = asyncio.get_running_loop()
        self._sock.setblocking(False)
        self._reader, self._writer = await asyncio.open_connection(sock=self._sock, limit=2**24)
        self._ready = loop.create_future()
        self._task = asyncio.create_task(self._read_loop())
        if bootstrap:
            self._writer.write(bootstrap)
            await self.drain()
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self._ready)
        except TimeoutError:
            raise SandboxStartError(f"exec server did not start within {timeout:.0f} s: {self._diag()}") from None

    def _diag(self) -> str:
        text = self.diagnostics.decode("utf-8", errors="replace").strip()
        return text[-500:] or "(no output)"

    @property
    def is_open(self) -> bool:
        return self.closed_reason is None and self._task is not None and not self._task.done()

    async def _read_frames(self) -> None:
        assert self._reader is not None
        pending = bytearray()
        while True:
            if self._multiplexed:
                header = await self._reader.readexactly(_MUX_HEADER.size)
                stream, size = _MUX_HEADER.unpack(header)
                payload = await self._reader.readexactly(size)
                if stream == 2:
                    self.diagnostics += payload
                    del self.diagnostics[:-8192]
                    continue
            else:
                payload = await self._reader.read(65536)
                if not payload:
                    raise asyncio.IncompleteReadError(b"", None)
            pending += payload
            while len(pending) >= 4:
                (size,) = _FRAME_HEADER.unpack_from(pending)
                if len(pending) < 4 + size:
                    break
                message = json.loads(bytes(pending[4 : 4 + size]))
                del pending[: 4 + size]
                self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if message.get("event"):
            if self.on_event is not None:
                self.on_event(message)
            return
        if message.get("ready"):
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(message)
            return
        future = self._pending.pop(message.get("id", -1), None)
        if future is not None and not future.done():
            future.set_result(message)

    async def _read_loop(self) -> None:
        try:
            await self._read_frames()
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self.closed_reason = f"exec channel closed ({type(exc).__name__}); server said: {self._diag()}"
        except Exception as exc:  # a corrupt frame means the channel is unusable
            self.closed_reason = f"exec channel broken: {type(exc).__name__}: {exc}"
        finally:
            if self.closed_reason is None:
                self.closed_reason = "exec channel closed"
            error = SandboxDied(f"sandbox died: {self.closed_reason}")
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(error)
            self._pending.clear()
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(error)

    async def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its reply; SandboxDied if the channel dies."""
        _, reply = self.send(payload)
        await self.drain()
        return await reply

    async def drain(self) -> None:
        if self._writer is not None:
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                raise SandboxDied(f"sandbox died: exec channel write failed ({exc})") from None

    def send(self, payload: dict[str, Any]) -> tuple[int, asyncio.Future[dict[str, Any]]]:
        """Queue one request; returns its id (for a later `kill`) and the future of its reply."""
        if not self.is_open or self._writer is None:
            raise SandboxDied(f"sandbox died: {self.closed_reason or 'exec channel not open'}")
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        data = json.dumps({**payload, "id": request_id}, separators=(",", ":")).encode()
        self._writer.write(_FRAME_HEADER.pack(len(data)) + data)
        return request_id, future

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        if self.closed_reason is None:
            self.closed_reason = "closed by the harness"
