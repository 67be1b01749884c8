"""A minimal HTTP/1.1 client that hands over body bytes the moment they arrive.

Why not Locust's clients: geventhttpclient's ``iter_content(n)`` blocks until n bytes have
arrived (events 1 ms apart get stamped together) and swallows a closed connection (a
truncated stream looks complete); ``requests`` costs more CPU per event. Here every
read is stamped with its arrival time (see ``kernel_stamps``), chunked framing is decoded
incrementally, and an early close or reset is reported instead of hidden. Under Locust the
socket module is gevent's, so reads yield to other users. Requests ask for no compression
(``Accept-Encoding: identity``); a server that gzips or deflates anyway is decoded read by
read, in bounded pieces (``INFLATE_PIECE_BYTES``), so a decompression bomb is cut off by
the event size limit instead of filling memory.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK
from tpot_locust.common.errors import (
    BAD_HTTP,
    CLIENT_ERROR,
    CONNECTION_ERROR,
    CONNECTION_RESET,
    TIMEOUT_CONNECT,
    StreamError,
)
from tpot_locust.common.secrets import redact_url
from tpot_locust.common.timings import int_array
from tpot_locust.wire.chunked import ChunkedDecoder
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.inflate import (
    DECODED_ENCODINGS,
    INFLATE_PIECE_BYTES,
    MAX_INFLATED_PER_READ,
    Inflater,
)
from tpot_locust.wire.segment_stamps import arrival_clock
from tpot_locust.wire.stamped_socket import Batch, Run, Split, StampedSocket
from tpot_locust.wire.tcp_info import retransmissions

Consume = Callable[[int, bytes], None]  # (arrival perf_counter_ns, body payload)
# Takes pieces already read as far as they are one run of events; the pieces left, or None
TakeRun = Callable[[list[tuple[bytes, int]]], "list[tuple[bytes, int]] | None"]
MAX_HEAD_BYTES = 64 * 1024
MAX_LENGTH_DIGITS = 18  # a Content-Length below 10^18 bytes still fits int64


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
            raise ValueError(f"not an http(s) URL: {redact_url(url)!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):  # the OpenAI base-URL habit: our paths start with /v1
            path = path[: -len("/v1")]
        return cls(parts.scheme, parts.hostname, port, path)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]
    connection: HTTPConnection
    first_body: bytes
    head_stamp_ns: int
    deadline: Deadline  # the request's one deadline: started at the send, moved by the reader
    complete: bool = False
    reset: bool = False
    _decoder: ChunkedDecoder | None = field(init=False, default=None)
    _inflater: Inflater | None = field(init=False, default=None)  # gzip, deflate
    _remaining: int | None = field(init=False, default=None)  # identity body bytes left
    # raised when the body is read, so that an HTTP error status still shows as such
    _length_error: StreamError | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding in DECODED_ENCODINGS:
            self._inflater = Inflater(encoding)
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._decoder = ChunkedDecoder()
            return
        try:
            self._remaining = self._content_length()
        except StreamError as error:
            self._length_error = error

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def inflating(self) -> bool:
        """The body's Content-Encoding (gzip, x-gzip, deflate) is decoded here."""
        return self._inflater is not None

    def read_into(self, consume: Consume) -> None:
        """Hand ``consume(arrival_ns, payload)`` every payload of the body, read by this
        greenlet; ``loop_reads.read_body`` is the same loop driven by the event loop.

        Ends when the body is complete, or when the peer closes or resets early; then
        ``complete`` is False and ``reset`` tells which. Raises ``ReadTimeout`` when no byte
        came before ``deadline.at_ns`` (which ``consume`` may move), ``StreamError`` for bad
        framing or a socket error other than a reset, and whatever ``consume`` raises.
        """
        if self.begin(consume):
            return
        while True:
            try:
                data, stamp = self.connection.recv_stamped(self.deadline)
            except ConnectionResetError:
                self.peer_closed(reset=True)
                return
            if self.absorb(data, stamp, consume):
                return

    def begin(self, consume: Consume, take_run: TakeRun | None = None) -> bool:
        """Hand on the body bytes that came with the head; whether the body has ended.
        Once ``take_run`` takes them (``PlainRuns.take_pieces``), the pieces go to it as
        far as they are a run."""
        payload = self.take(self.first_body)
        if payload:
            consume(self.head_stamp_ns, payload)
        if self._inflater is not None:
            self._inflate_rest(self.head_stamp_ns, consume)
        if self.settle():
            return True
        # the rest of the head's read, each segment with its own stamp
        pieces = self.connection.take_pending()
        at = 0
        while at < len(pieces):
            if take_run is not None and (rest := take_run(pieces[at:])) is not None:
                return any(self.absorb(data, stamp, consume) for data, stamp in rest)
            data, stamp = pieces[at]
            if self.absorb(data, stamp, consume):
                return True
            at += 1
        return False

    def absorb(self, data: bytes, stamp: int, consume: Consume) -> bool:
        """One socket read (b"": the peer closed) handed on; whether the body has ended.
        The step both read loops share."""
        if not data:
            self.peer_closed(reset=False)
            return True
        payload = self.take(data)
        if payload:
            consume(stamp, payload)
        if self._inflater is not None:
            self._inflate_rest(stamp, consume)
        return self.settle()

    def take(self, data: bytes) -> bytes:
        """The body payload in bytes just read (framing removed; of a compressed body, the
        first piece it decodes to: ``absorb`` hands on the rest). Hand it on, then call
        ``settle``: a framing error after good payload is raised there, not lost."""
        if self._decoder is not None:
            data = self._decoder.feed(data) if data else b""
        else:
            if self._length_error is not None:
                raise self._length_error
            if self._remaining is not None:
                data = data[: self._remaining]
                self._remaining -= len(data)
        inflater = self._inflater
        return data if inflater is None or not data else inflater.feed(data)

    def _inflate_rest(self, stamp: int, consume: Consume) -> None:
        """Hand on, piece by piece, what the last read decompresses to beyond its first
        piece: a consumer that refuses (an oversized event) stops the decompression, and so
        does ``MAX_INFLATED_PER_READ``: 200 MiB of line ends from 200 KB on the wire held
        the event loop 11 s in one read, never an event too large."""
        inflater = self._inflater
        inflated = INFLATE_PIECE_BYTES
        while inflater is not None and inflater.more:
            if inflated >= MAX_INFLATED_PER_READ:
                raise StreamError(
                    BAD_HTTP,
                    f"compressed body: one read inflates to over {MAX_INFLATED_PER_READ}"
                    " bytes (a decompression bomb, not a stream)",
                )
            piece = inflater.next_piece()
            inflated += len(piece)
            if piece:
                consume(stamp, piece)

    @property
    def between_chunks(self) -> bool:
        """A chunked body (not compressed) whose framing holds nothing back: the next
        bytes start a chunk, so whole chunks may be taken without ``take``."""
        decoder = self._decoder
        return decoder is not None and decoder.at_boundary and self._inflater is None

    def settle(self) -> bool:
        """Whether the body is complete (the connection is then ready for reuse or closed);
        raises the framing error ``take`` kept."""
        decoder = self._decoder
        if decoder is not None:
            if decoder.failure is not None:
                raise decoder.failure
            ended = decoder.done
        else:
            ended = self._remaining == 0
        if ended:
            if self._inflater is not None:
                self._inflater.check_ended()
            self._finish(keep_alive=True)
        return ended

    def peer_closed(self, reset: bool) -> None:
        """The peer closed (``reset``: reset) before ``settle`` saw the body complete."""
        self.reset = reset
        # A close ends a body only when it has neither length nor chunked framing.
        framed = self._decoder is not None or self._remaining is not None
        inflated = self._inflater is None or self._inflater.ended
        self._finish(keep_alive=False, complete=not reset and not framed and inflated)

    def read(self, limit: int | None = None) -> bytes:
        """The whole body, every read within the deadline's idle limit of the previous one;
        with ``limit``, at most that many bytes (then the connection is closed, since the
        rest of the body was not read)."""
        pieces: list[bytes] = []
        size = 0

        def consume(stamp: int, piece: bytes) -> None:
            nonlocal size
            self.deadline.arrived(stamp)
            pieces.append(piece)
            size += len(piece)
            if limit is not None and size >= limit:
                raise _Enough()

        try:
            self.read_into(consume)
        except _Enough:
            if not self.complete:
                self.connection.close()
        body = b"".join(pieces)
        return body if limit is None else body[:limit]

    def _content_length(self) -> int | None:
        value = self.headers.get("content-length")
        if value is None:
            return None
        # ASCII digits only: str.isdigit() takes "²" and other Unicode digits, which int()
        # then refuses; and no more digits than a length can have (int() refuses 4,300+)
        if not (value.isascii() and value.isdigit()) or len(value) > MAX_LENGTH_DIGITS:
            raise StreamError(BAD_HTTP, f"bad Content-Length {value[:40]!r}")
        return int(value)

    def _finish(self, keep_alive: bool, complete: bool = True) -> None:
        self.complete = complete
        wants_close = self.headers.get("connection", "").lower() == "close"
        if not keep_alive or wants_close or not complete:
            self.connection.close()


class HTTPConnection:
    """One keep-alive connection, reused by one Locust user for its requests in turn."""

    def __init__(
        self,
        origin: Origin,
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        clock: str | None = None,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.origin = origin
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.clock = clock or arrival_clock()
        self.tls_context = tls_context  # https: None is the default context (verified)
        self._stamped: StampedSocket | None = None
        self._request_socket: StampedSocket | None = None  # the current request's, kept
        self.connections_opened = 0
        self.read_delays_ns = int_array()  # of the current request: see ``StampedSocket``
        self._retransmits_at_send: int | None = None

    @property
    def connected(self) -> bool:
        """A socket is open (kept between requests while the server keeps it alive)."""
        return self._stamped is not None

    @property
    def request_clock(self) -> str:
        """The clock the current request's reads were stamped on (also after its connection
        closed): ``segment`` only when every one was cut into its segments."""
        stamped = self._request_socket
        if stamped is None:
            return ""
        if stamped.clock == SEGMENT_CLOCK and stamped.unrecovered_reads:
            return KERNEL_CLOCK
        return stamped.clock

    def retransmits_since_send(self) -> int:
        """Segments retransmitted on this connection since the current request's send, ours
        and the server's (``tcp_info.retransmissions``); 0 where the kernel cannot say, or
        the connection is closed."""
        before = self._retransmits_at_send
        now = retransmissions(self._stamped.sock) if before is not None and self._stamped else None
        return now - before if now is not None and before is not None and now > before else 0

    def close(self) -> None:
        if self._stamped is not None:
            try:
                self._stamped.close()
            finally:
                self._stamped = None

    def open(self) -> None:
        """Connect now (ahead of a request whose send must not wait for it); a failure
        is left for the request to meet and categorise."""
        if self._stamped is None:
            try:
                self._stamped = self._connect()
            except StreamError:
                pass

    def _connect(self) -> StampedSocket:
        origin = self.origin
        try:
            family, address = resolve(origin.host, origin.port)
            stamped = StampedSocket.connect(family, address, self.clock, self.connect_timeout)
        except TimeoutError:
            raise StreamError(TIMEOUT_CONNECT, f"connect to {origin.host_header}") from None
        except OSError as error:
            raise StreamError(
                CONNECTION_ERROR, f"connect to {origin.host_header}: {error.strerror or error}"
            ) from None
        if origin.scheme == "https":
            try:
                context = self.tls_context or ssl.create_default_context()
                stamped.start_tls(context, origin.host, self.connect_timeout)
            except TimeoutError:
                stamped.close()
                raise StreamError(
                    TIMEOUT_CONNECT, f"TLS handshake with {origin.host_header}"
                ) from None
            except OSError as error:  # ssl.SSLError included
                stamped.close()
                raise StreamError(
                    CONNECTION_ERROR, f"TLS with {origin.host_header}: {error.strerror or error}"
                ) from None
        self.connections_opened += 1
        return stamped

    def recv_stamped(self, deadline: Deadline) -> tuple[bytes, int]:
        """The next piece of what arrived (b"" at end of stream) and its arrival
        (``perf_counter_ns``): its segment's kernel stamp, or its read's, else the time the
        read returned (``StampedSocket``).

        Raises ``ReadTimeout`` (nothing before ``deadline.at_ns``),
        ``ConnectionResetError`` (reset, broken pipe, aborted) or ``StreamError`` (any
        other socket error, as ``connection_error``).
        """
        stamped = self._stamped
        if stamped is None:
            return b"", time.perf_counter_ns()
        if stamped.pending:
            return stamped.pending.popleft()
        timeout = deadline.timeout_s(time.perf_counter_ns())
        if timeout <= 0:
            raise ReadTimeout()  # a zero timeout would make the read non-blocking
        try:
            return stamped.recv_piece(timeout)
        except TimeoutError:
            raise ReadTimeout() from None

    def take_pending(self) -> list[tuple[bytes, int]]:
        """Pieces already read and not yet handed on (those after a response's head)."""
        stamped = self._stamped
        if stamped is None or not stamped.pending:
            return []
        pieces = list(stamped.pending)
        stamped.pending.clear()
        return pieces

    def loop_fileno(self) -> int | None:
        """The socket's descriptor when ``read_ready`` may be used, else None."""
        return None if self._stamped is None else self._stamped.loop_fileno()

    @property
    def stamps_each_segment(self) -> bool:
        """Every segment this connection reads is stamped by the tap (the ``segment``
        clock): a read may come late without moving a stamp."""
        return self._stamped is not None and self._stamped.clock == SEGMENT_CLOCK

    @property
    def read_was_full(self) -> bool:
        """The last read filled its buffer: more may be waiting."""
        return self._stamped is not None and self._stamped.read_full

    def read_ready_run(
        self, split: Split, batch: Batch | None = None
    ) -> Run | list[tuple[bytes, int]] | None:
        """``read_ready``, or a read of whole events taken as one ``Run``
        (``StampedSocket.read_ready_run``)."""
        return self._stamped.read_ready_run(split, batch)  # type: ignore[union-attr]

    def read_ready(self, batch: Batch | None = None) -> list[tuple[bytes, int]] | None:
        """``recv_stamped`` for a socket the event loop said is readable: never waits;
        the pieces of one read (maybe none), None when nothing was there after all. Only
        where ``loop_fileno`` is not None. ``batch``: a batched read's
        (``StampedSocket.read_ready``)."""
        return self._stamped.read_ready(batch)  # type: ignore[union-attr]

    def request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes = b"",
        deadline: Deadline | None = None,
    ) -> tuple[Response, int]:
        """Send a request; returns the response head and ``perf_counter_ns`` just before send.

        A reused connection that the server closed while idle fails before any response
        byte; that case is retried once on a fresh connection, as browsers and HTTPX do.
        ``deadline`` (by default each read within ``read_timeout``) is started at the send
        and governs the head; the response keeps it for the body.
        Raises ``StreamError`` (categorised) or ``ReadTimeout``; the connection is closed.
        """
        message = self._message(method, path, headers, body)
        deadline = deadline or Deadline.per_read(self.read_timeout)
        self.read_delays_ns = int_array()
        for attempt in (0, 1):
            reused = self._stamped is not None
            if self._stamped is None:
                self._stamped = self._connect()
            stamped = self._request_socket = self._stamped
            stamped.begin_request()
            self.read_delays_ns = stamped.read_delays_ns
            self._retransmits_at_send = retransmissions(stamped.sock)
            send_ns = time.perf_counter_ns()
            stamped.sent_at(send_ns)
            deadline.start(send_ns)
            try:
                stamped.send(message, max(deadline.timeout_s(send_ns), 0.001))
                return self._read_head(deadline), send_ns
            except (ConnectionResetError, BrokenPipeError, _EmptyHead) as error:
                self.close()
                if reused and attempt == 0:
                    continue
                if isinstance(error, _EmptyHead):
                    raise StreamError(CONNECTION_RESET, "closed before the response") from None
                raise StreamError(CONNECTION_RESET, f"{error.__class__.__name__}") from None
            except (TimeoutError, ReadTimeout):
                self.close()
                raise ReadTimeout() from None
            except StreamError:
                self.close()
                raise
            except OSError as error:
                self.close()
                raise StreamError(CONNECTION_ERROR, error.strerror or str(error)) from None
        raise AssertionError("unreachable")

    def _message(self, method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
        head = [
            f"{method} {self.origin.base_path}{path} HTTP/1.1",
            f"Host: {self.origin.host_header}",
        ]
        encoding_named = False
        for name, value in headers.items():
            # A line break would split the head (header injection); a value may be a secret,
            # so only the header's name is ever shown.
            if any(c in name or c in value for c in "\r\n\0"):
                raise StreamError(CLIENT_ERROR, f"header {name!r} contains a line break")
            head.append(f"{name}: {value}")
            encoding_named = encoding_named or name.strip().lower() == "accept-encoding"
        if not encoding_named:  # a compressed stream is decoded, but costs the server CPU
            head.append("Accept-Encoding: identity")
        head.append(f"Content-Length: {len(body)}")
        try:
            return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        except UnicodeEncodeError:
            raise StreamError(CLIENT_ERROR, "request headers must be latin-1 text") from None

    def _read_head(self, deadline: Deadline) -> Response:
        buffer = b""
        stamp = time.perf_counter_ns()
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                response = self._parse_head(buffer, end, stamp, deadline)
                if 100 <= response.status < 200 and response.status != 101:
                    buffer = response.first_body  # an interim response (100, 103): skip it
                    continue
                return response
            if len(buffer) > MAX_HEAD_BYTES:
                raise StreamError(BAD_HTTP, "response head too large")
            data, stamp = self.recv_stamped(deadline)
            if not data:
                if buffer:
                    raise StreamError(BAD_HTTP, "connection closed inside the response head")
                raise _EmptyHead()
            buffer += data

    def _parse_head(self, buffer: bytes, end: int, stamp: int, deadline: Deadline) -> Response:
        lines = buffer[:end].decode("latin-1").split("\r\n")
        try:
            version, status, *reason = lines[0].split(" ", 2)
            status_code = int(status)
        except ValueError:
            status_code = 0
            version = ""
        if not version.startswith("HTTP/") or not 100 <= status_code <= 599:
            raise StreamError(BAD_HTTP, f"bad status line {lines[0][:60]!r}")
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
            deadline=deadline,
        )


_RESOLVED: dict[tuple[str, int], tuple[int, tuple[Any, ...]]] = {}


def resolve(host: str, port: int) -> tuple[int, tuple[Any, ...]]:
    """The address to connect to, looked up once per host and port.

    Why: ``socket.create_connection`` asks gevent's resolver every time, which runs
    ``getaddrinfo`` on a thread pool even for an IP literal; a burst of eight new
    connections held the event loop for 15 ms (the pool's first thread), 3 ms after."""
    key = (host, port)
    found = _RESOLVED.get(key)
    if found is None:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        found = _RESOLVED[key] = (family, address)
    return found


class _Enough(Exception):
    """``Response.read`` has as many bytes as it was asked for."""


class _EmptyHead(Exception):
    """The peer closed before sending a single response byte."""
