"""A minimal HTTP/1.1 client that hands over body bytes the moment they arrive.

Why not Locust's clients: geventhttpclient's ``iter_content(n)`` blocks until n bytes have
arrived (events 1 ms apart get stamped together) and swallows a closed connection (a
truncated stream looks complete); ``requests`` costs more CPU per event. Here every
``recv`` is stamped with ``perf_counter_ns`` as it returns, chunked framing is decoded
incrementally, and an early close or reset is reported instead of hidden. Under Locust the
socket module is gevent's, so reads yield to other users.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tpot_locust.errors import (
    BAD_HTTP,
    CONNECTION_ERROR,
    CONNECTION_RESET,
    TIMEOUT_CONNECT,
    StreamError,
)

RECV_BYTES = 65536
MAX_HEAD_BYTES = 64 * 1024


class ReadTimeout(Exception):
    """No byte arrived within the read timeout (the caller decides which timeout it was)."""


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Origin:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


class ChunkedDecoder:
    """Incremental ``Transfer-Encoding: chunked`` decoder: feed raw bytes, get payload."""

    __slots__ = ("_buffer", "_remaining", "_state")

    _SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0
        self._state = self._SIZE

    @property
    def done(self) -> bool:
        return self._state == self._DONE

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        position = 0
        payload: list[bytes] = []
        while self._state != self._DONE:
            if self._state == self._DATA:
                piece = buffer[position : position + self._remaining]
                if piece:
                    payload.append(piece)
                position += len(piece)
                self._remaining -= len(piece)
                if self._remaining:
                    break
                self._state = self._DATA_END
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                if len(buffer) - position > 1024:
                    raise StreamError(BAD_HTTP, "chunk framing line too long")
                break
            line = buffer[position:line_end]
            position = line_end + 2
            if self._state == self._DATA_END:
                if line:
                    raise StreamError(BAD_HTTP, "chunk data longer than its declared size")
                self._state = self._SIZE
            elif self._state == self._SIZE:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise StreamError(BAD_HTTP, f"bad chunk size line {line[:40]!r}") from None
                if size < 0:
                    raise StreamError(BAD_HTTP, "negative chunk size")
                self._state = self._TRAILER if size == 0 else self._DATA
                self._remaining = size
            elif not line:  # the empty line after the last chunk's trailers
                self._state = self._DONE
        self._buffer = buffer[position:]
        return b"".join(payload)


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]
    connection: HTTPConnection
    first_body: bytes
    head_stamp_ns: int
    complete: bool = False
    reset: bool = False
    _stamps: list[int] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    def iter_body(self, deadline_ns: int | None = None) -> Iterator[tuple[int, bytes]]:
        """Yield ``(perf_counter_ns at arrival, payload bytes)`` per socket read.

        Ends when the body is complete, or when the peer closes or resets early; then
        ``complete`` is False and ``reset`` tells which. Raises ``ReadTimeout``.
        """
        conn = self.connection
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        length_header = self.headers.get("content-length")
        remaining = int(length_header) if length_header is not None and not chunked else None
        decoder = ChunkedDecoder() if chunked else None
        data, stamp = self.first_body, self.head_stamp_ns
        while True:
            if data:
                if decoder is not None:
                    payload = decoder.feed(data)
                    if payload:
                        yield stamp, payload
                    if decoder.done:
                        self._finish(keep_alive=True)
                        return
                else:
                    if remaining is not None:
                        data = data[:remaining]
                        remaining -= len(data)
                    yield stamp, data
                    if remaining == 0:
                        self._finish(keep_alive=True)
                        return
            elif remaining == 0:
                self._finish(keep_alive=True)
                return
            try:
                data = conn.recv(deadline_ns)
            except ConnectionResetError:
                self.reset = True
                self._finish(keep_alive=False, complete=False)
                return
            stamp = time.perf_counter_ns()
            if not data:
                # A close ends a body only when it has neither length nor chunked framing.
                self._finish(keep_alive=False, complete=decoder is None and remaining is None)
                return

    def read(self, deadline_ns: int | None = None) -> bytes:
        return b"".join(piece for _, piece in self.iter_body(deadline_ns))

    def _finish(self, keep_alive: bool, complete: bool = True) -> None:
        self.complete = complete
        wants_close = self.headers.get("connection", "").lower() == "close"
        if not keep_alive or wants_close or not complete:
            self.connection.close()


class HTTPConnection:
    """One keep-alive connection, reused by one Locust user for its requests in turn."""

    def __init__(
        self, origin: Origin, connect_timeout: float = 10.0, read_timeout: float = 60.0
    ) -> None:
        self.origin = origin
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._sock: socket.socket | None = None
        self._pending = b""
        self.connections_opened = 0

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._pending = b""

    def _connect(self) -> socket.socket:
        origin = self.origin
        try:
            sock = socket.create_connection((origin.host, origin.port), self.connect_timeout)
        except TimeoutError:
            raise StreamError(TIMEOUT_CONNECT, f"connect to {origin.host_header}") from None
        except OSError as error:
            raise StreamError(
                CONNECTION_ERROR, f"connect to {origin.host_header}: {error.strerror or error}"
            ) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if origin.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=origin.host)
        self.connections_opened += 1
        return sock

    def recv(self, deadline_ns: int | None = None) -> bytes:
        sock = self._sock
        if sock is None:
            return b""
        timeout = self.read_timeout
        if deadline_ns is not None:
            timeout = min(timeout, max(deadline_ns - time.perf_counter_ns(), 0) / 1e9)
        sock.settimeout(timeout)
        try:
            return sock.recv(RECV_BYTES)
        except TimeoutError:
            raise ReadTimeout() from None
        except (BrokenPipeError, ConnectionAbortedError):
            raise ConnectionResetError() from None

    def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[Response, int]:
        """Send a request; returns the response head and ``perf_counter_ns`` just before send.

        A reused connection that the server closed while idle fails before any response
        byte; that case is retried once on a fresh connection, as browsers and HTTPX do.
        """
        head = [
            f"{method} {self.origin.base_path}{path} HTTP/1.1",
            f"Host: {self.origin.host_header}",
        ]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head.append(f"Content-Length: {len(body)}")
        message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        for attempt in (0, 1):
            reused = self._sock is not None
            if self._sock is None:
                self._sock = self._connect()
            send_ns = time.perf_counter_ns()
            try:
                self._sock.settimeout(self.read_timeout)
                self._sock.sendall(message)
                return self._read_head(), send_ns
            except (ConnectionResetError, BrokenPipeError, _EmptyHead) as error:
                self.close()
                if reused and attempt == 0:
                    continue
                if isinstance(error, _EmptyHead):
                    raise StreamError(CONNECTION_RESET, "closed before the response") from None
                raise StreamError(CONNECTION_RESET, f"{error.__class__.__name__}") from None
            except TimeoutError:
                self.close()
                raise ReadTimeout() from None
            except OSError as error:
                self.close()
                raise StreamError(CONNECTION_ERROR, str(error)) from None
        raise AssertionError("unreachable")

    def _read_head(self) -> Response:
        buffer = b""
        while True:
            data = self._sock.recv(RECV_BYTES) if self._sock else b""
            stamp = time.perf_counter_ns()
            if not data:
                if buffer:
                    raise StreamError(BAD_HTTP, "connection closed inside the response head")
                raise _EmptyHead()
            buffer += data
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buffer) > MAX_HEAD_BYTES:
                raise StreamError(BAD_HTTP, "response head too large")
        lines = buffer[:end].decode("latin-1").split("\r\n")
        try:
            _version, status, *reason = lines[0].split(" ", 2)
            status_code = int(status)
        except ValueError:
            raise StreamError(BAD_HTTP, f"bad status line {lines[0][:60]!r}") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return Response(
            status=status_code,
            reason=reason[0] if reason else "",
            headers=headers,
            connection=self,
            first_body=buffer[end + 4 :],
            head_stamp_ns=stamp,
        )


class _EmptyHead(Exception):
    """The peer closed before sending a single response byte."""
