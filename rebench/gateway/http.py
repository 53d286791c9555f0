"""Reading and writing the gateway's HTTP/1.1 messages, with every limit enforced while reading.

The client is the agent's code, so nothing it sends may cost the harness more than linear work in
the bytes it sent, or make it wait for bytes it said it would send past a limit: the head is read
line by line under a byte and a count limit, a Content-Length body only when it fits, a chunked
body into one bytearray (never `bytes +=`) and refused as soon as a chunk's declared size would
take it past the limit. A request that breaks the protocol is a `BadRequest` carrying the HTTP
status to answer with; the connection is closed after that answer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100
MAX_CHUNK_LINE = 1024
_HEX_DIGITS = b"0123456789abcdefABCDEF"
BLOCK_BYTES = 64 * 1024
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           411: "Length Required", 413: "Payload Too Large", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error", 502: "Bad Gateway",
           503: "Service Unavailable", 504: "Gateway Timeout"}


class BadRequest(Exception):
    """The request breaks HTTP or a limit: answered with `status`, then the connection closes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Head:
    method: str
    path: str
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


async def _line(reader: asyncio.StreamReader, limit: int, what: str) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(431 if what == "header" else 400, f"the {what} line is over the size limit") from None
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise BadRequest(400, f"the connection ended inside the {what} line") from None
        raise
    if len(line) > limit:
        raise BadRequest(431 if what == "header" else 400, f"the {what} line is over {limit} bytes")
    return line


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The request line and headers; None when the client closed the connection between requests."""
    try:
        line = await _line(reader, MAX_HEADER_BYTES, "request")
    except asyncio.IncompleteReadError:
        return None
    parts = line.decode("latin-1").strip().split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        raise BadRequest(400, "the request line is not `METHOD /path HTTP/1.1`")
    headers: dict[str, str] = {}
    size = len(line)
    for _ in range(MAX_HEADERS + 1):
        raw = await _line(reader, MAX_HEADER_BYTES, "header")
        size += len(raw)
        if size > MAX_HEADER_BYTES:
            raise BadRequest(431, f"the request's headers are over {MAX_HEADER_BYTES} bytes")
        if raw in (b"\r\n", b"\n"):
            return Head(parts[0].upper(), parts[1].split("?", 1)[0], headers)
        name, colon, value = raw.decode("latin-1").partition(":")
        if not colon or not name.strip() or name != name.strip():
            raise BadRequest(400, f"a header line is not `Name: value`: {raw[:80]!r}")
        headers[name.lower()] = value.strip()
    raise BadRequest(431, f"the request has over {MAX_HEADERS} headers")


def declared_length(head: Head) -> int | None:
    """The Content-Length (None: chunked); BadRequest when missing on a chunk-less body or over the limit."""
    encoding = head.headers.get("transfer-encoding", "").lower()
    if encoding:
        if encoding != "chunked":
            raise BadRequest(400, f"transfer-encoding {encoding!r} is not supported (chunked is)")
        return None
    text = head.headers.get("content-length", "0").strip()
    if not text.isdigit():
        raise BadRequest(400, f"content-length {text[:40]!r} is not a number")
    length = int(text)
    if length > MAX_BODY_BYTES:
        raise BadRequest(413, f"the request body is over {MAX_BODY_BYTES} bytes")
    return length


async def read_body(reader: asyncio.StreamReader, head: Head) -> bytes:
    """The body, whole, in linear time; BadRequest past the limit or on broken chunk framing. A chunked
    body is read in blocks and may read past its end: `head.keep_alive` turns False then."""
    length = declared_length(head)
    try:
        if length is not None:
            return await reader.readexactly(length) if length else b""
    except asyncio.IncompleteReadError:
        raise BadRequest(400, "the connection ended inside the request body") from None
    head.headers["connection"] = "close"
    return await _ChunkedBody(reader).read()


class _ChunkedBody:
    """Parses chunked framing from blocks read off the connection: Python work per chunk is a few
    slice and find calls, and the buffer is compacted once per block, never per chunk."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.buffer = bytearray()
        self.pos = 0

    async def _fill(self) -> None:
        del self.buffer[:self.pos]
        self.pos = 0
        block = await self.reader.read(BLOCK_BYTES)
        if not block:
            raise BadRequest(400, "the connection ended inside the request body")
        self.buffer += block
        await asyncio.sleep(0)  # a flood of tiny chunks shares the loop with the other connections

    async def _line(self, limit: int) -> bytes:
        end = self.buffer.find(b"\n", self.pos)
        while end < 0:
            if len(self.buffer) - self.pos > limit:
                raise BadRequest(400, f"a chunk-size or trailer line is over {limit} bytes")
            await self._fill()
            end = self.buffer.find(b"\n", self.pos)
        line = bytes(self.buffer[self.pos:end])
        self.pos = end + 1
        return line

    async def read(self) -> bytes:
        body = bytearray()
        while True:
            size_text = (await self._line(MAX_CHUNK_LINE)).split(b";", 1)[0].strip()
            if not size_text or len(size_text) > 16 or size_text.strip(_HEX_DIGITS):
                raise BadRequest(400, f"the chunk size {size_text[:40]!r} is not hexadecimal")
            size = int(size_text, 16)
            if len(body) + size > MAX_BODY_BYTES:
                raise BadRequest(413, f"the request body is over {MAX_BODY_BYTES} bytes")
            if size == 0:
                while (await self._line(MAX_HEADER_BYTES)).strip():
                    pass  # trailers, ignored
                return bytes(body)
            while len(self.buffer) - self.pos < size + 2:
                await self._fill()
            end = self.pos + size
            body += self.buffer[self.pos:end]
            if self.buffer[end:end + 2] != b"\r\n":
                raise BadRequest(400, "a chunk does not end with CRLF")
            self.pos = end + 2


async def write_answer(writer: asyncio.StreamWriter, status: int, answer: dict[str, Any], extra: dict[str, str],
                       keep: bool) -> None:
    data = json.dumps(answer).encode()
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", "Content-Type: application/json",
            f"Content-Length: {len(data)}", f"Connection: {'keep-alive' if keep else 'close'}",
            *(f"{k}: {v}" for k, v in extra.items())]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    await writer.drain()
