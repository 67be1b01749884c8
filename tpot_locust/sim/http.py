"""Minimal HTTP/1.1 server side: request framing, keep-alive and response heads.

Only what OpenAI clients need: Content-Length bodies, ``Expect: 100-continue``, pipelined
requests served in order, ``Connection: close`` honoured. A stdlib-only asyncio Protocol keeps
the per-token write path free of framework overhead.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .kernel_reads import KernelReads
from .send_stamps import SendStamps

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    505: "HTTP Version Not Supported",
}
ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError"}
SERVER_HEADER = b"server: tpot-sim\r\n"


class HttpError(Exception):
    """A framing error: answered with ``status`` and the connection is closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class HttpRequest:
    method: str
    target: str
    path: str
    version: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes
    keep_alive: bool
    # perf_counter_ns when its first bytes reached this host (the kernel's stamp of the read
    # that brought them, where it has one; else when the loop read them)
    arrival_ns: int = 0


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        raise HttpError(400, f"malformed request line {lines[0][:100]!r}")
    method, target, version = parts
    if not version.startswith("HTTP/"):
        raise HttpError(400, f"malformed HTTP version {version[:20]!r}")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505, f"unsupported HTTP version {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise HttpError(400, f"malformed header line {line[:100]!r}")
        name, value = name.lower(), value.strip()
        if name in headers:
            if name == "content-length" and headers[name] != value:
                raise HttpError(400, "conflicting Content-Length headers")
            if name != "content-length":
                headers[name] = headers[name] + ", " + value
        else:
            headers[name] = value
    return method, target, version, headers


def _body_length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise HttpError(501, "Transfer-Encoding request bodies are not supported")
    raw = headers.get("content-length", "0")
    if not raw.isdigit():
        raise HttpError(400, f"malformed Content-Length {raw[:20]!r}")
    length = int(raw)
    if length > MAX_BODY_BYTES:
        raise HttpError(413, f"request body over {MAX_BODY_BYTES} bytes")
    return length


def _keep_alive(version: str, headers: dict[str, str]) -> bool:
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


def _path(target: str) -> str:
    if "://" in target:  # absolute-form: drop scheme and authority
        target = "/" + target.split("://", 1)[1].partition("/")[2]
    return target.split("?", 1)[0]


class RequestReader:
    """Incremental parser: ``feed`` bytes, then take complete requests with ``next_request``."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._head: tuple[str, str, str, dict[str, str], int] | None = None
        self.continue_pending = False  # the client waits for "100 Continue" before the body
        self._started_ns = 0  # when the first bytes of the request being read arrived
        self._last_ns = 0  # when the last bytes fed arrived

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes, arrival_ns: int = 0) -> None:
        if not self._buf and self._head is None:
            self._started_ns = arrival_ns  # a request begins with these bytes
        self._last_ns = arrival_ns
        self._buf += data

    def next_request(self) -> HttpRequest | None:
        """A complete request, or None if more bytes are needed; raises ``HttpError``."""
        buf = self._buf
        if self._head is None:
            while buf[:2] == b"\r\n":  # tolerated empty lines between requests
                del buf[:2]
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise HttpError(431, "request head too large")
                return None
            method, target, version, headers = _parse_head(bytes(buf[:end]))
            del buf[: end + 4]
            length = _body_length(headers)
            self._head = (method, target, version, headers, length)
            if headers.get("expect", "").lower() == "100-continue" and len(buf) < length:
                self.continue_pending = True
        method, target, version, headers, length = self._head
        if len(buf) < length:
            return None
        body = bytes(buf[:length])
        del buf[:length]
        self._head = None
        keep_alive = _keep_alive(version, headers)
        arrival_ns, self._started_ns = self._started_ns, self._last_ns  # a pipelined next one
        return HttpRequest(
            method, target, _path(target), version, headers, body, keep_alive, arrival_ns
        )


def response_head(
    status: int, headers: Iterable[tuple[str, str]], keep_alive: bool, *, chunked: bool = False
) -> bytes:
    reason = REASONS.get(status, "Unknown").encode()
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason), SERVER_HEADER]
    lines.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers)
    if chunked:
        lines.append(b"transfer-encoding: chunked\r\n")
    lines.append(b"connection: keep-alive\r\n\r\n" if keep_alive else b"connection: close\r\n\r\n")
    return b"".join(lines)


def full_response(
    status: int,
    body: bytes,
    keep_alive: bool,
    content_type: str = "application/json",
    headers: Iterable[tuple[str, str]] = (),
) -> bytes:
    meta = [("content-type", content_type), ("content-length", str(len(body))), *headers]
    return response_head(status, meta, keep_alive) + body


def error_body(status: int, message: str) -> bytes:
    """OpenAI-style error JSON."""
    error = {"message": message, "type": ERROR_TYPES.get(status, "Error"), "code": status}
    return json.dumps({"error": error}).encode("utf-8")


Handler = Callable[["HttpConnection", HttpRequest], None]


class HttpConnection(asyncio.Protocol):
    """One client connection; requests are handed to ``handler`` one at a time.

    The handler answers with ``respond`` or, for a long response, writes via ``write`` and
    calls ``finish`` at the end; only then is the next pipelined request parsed.
    """

    def __init__(
        self,
        handler: Handler,
        registry: set[HttpConnection],
        to_perf_ns: Callable[[int], int] | None = None,
        stamp_sends: bool = False,
    ) -> None:
        self._handler = handler
        self._registry = registry
        self._reader = RequestReader()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.on_lost: Callable[[], None] | None = None  # set while a response is in flight
        self._pumping = False
        self._to_perf_ns = to_perf_ns  # a kernel stamp (wall ns) on our clock; None: no stamps
        self._stamp_sends = stamp_sends  # keep the kernel's transmit stamps (for the truth)
        self._kernel_reads: KernelReads | None = None
        self.send_stamps: SendStamps | None = None  # every write goes through ``write`` then

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._registry.add(self)
        if self._to_perf_ns is not None:
            self._kernel_reads = reads = KernelReads.take_over(
                transport, self._received, self._to_perf_ns, self._stamp_sends
            )
            self.send_stamps = None if reads is None else reads.send_stamps

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._registry.discard(self)
        if self._kernel_reads is not None:
            self._kernel_reads.close()
        callback, self.on_lost = self.on_lost, None
        if callback is not None:
            callback()

    def data_received(self, data: bytes) -> None:
        self._received(data, time.perf_counter_ns())

    def _received(self, data: bytes, arrival_ns: int) -> None:
        self._reader.feed(data, arrival_ns)
        self._pump()

    def _resume_reading(self) -> None:
        if self._kernel_reads is not None:
            self._kernel_reads.resume()
        elif self.transport is not None:
            self.transport.resume_reading()

    def _pause_reading(self) -> None:
        if self._kernel_reads is not None:
            self._kernel_reads.pause()
        elif self.transport is not None:
            self.transport.pause_reading()

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)
            if self.send_stamps is not None:
                self.send_stamps.wrote(len(data))

    def respond(self, data: bytes, keep_alive: bool) -> None:
        self.write(data)
        self.finish(keep_alive)

    def finish(self, keep_alive: bool) -> None:
        """The current response is complete: close, or go on with buffered requests."""
        self.busy = False
        self.on_lost = None
        if self.transport is None:
            return
        if not keep_alive:
            self.transport.close()
            return
        self._resume_reading()
        if self._reader.buffered and not self._pumping:  # inside _pump its loop goes on
            self._pump()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _pump(self) -> None:
        self._pumping = True
        try:
            self._pump_requests()
        finally:
            self._pumping = False

    def _pump_requests(self) -> None:
        while not self.busy and not self.closing:
            try:
                request = self._reader.next_request()
            except HttpError as exc:
                self.busy = True
                body = error_body(exc.status, exc.message)
                self.respond(full_response(exc.status, body, False), False)
                return
            if self._reader.continue_pending:
                self._reader.continue_pending = False
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            if request is None:
                return
            self.busy = True
            self._handler(self, request)
        if self.busy and self._reader.buffered > MAX_HEAD_BYTES and self.transport is not None:
            self._pause_reading()  # a client pipelining far ahead waits for us
