"""A minimal HTTP/1.1 client that hands over body bytes the moment they arrive.

Why not Locust's clients: geventhttpclient's ``iter_content(n)`` blocks until n bytes have
arrived (events 1 ms apart get stamped together) and swallows a closed connection (a
truncated stream looks complete); ``requests`` costs more CPU per event. Here every
read is stamped with its arrival time (see ``kernel_stamps``), chunked framing is decoded
incrementally (``http_response``), and an early close or reset is reported instead of
hidden. Under Locust the socket module is gevent's, so reads yield to other users. Requests
ask for no compression (``Accept-Encoding: identity``).
"""

from __future__ import annotations

import re
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK, stamp_ns
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
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.http_response import Response
from tpot_locust.wire.segment_stamps import arrival_clock
from tpot_locust.wire.stamped_socket import Batch, Run, Split, StampedSocket
from tpot_locust.wire.tcp_info import retransmissions

MAX_HEAD_BYTES = 64 * 1024


# What a URL's path may hold as it is (RFC 3986 pchar and "/"; "%" starts an escape): a
# space or a control character would go into the request line raw.
_UNSAFE_PATH = re.compile(r"[^A-Za-z0-9\-._~!$&'()*+,;=:@/%]")


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
        if bad := _UNSAFE_PATH.search(parts.path):
            raise ValueError(
                f"{redact_url(url)!r}: {bad.group()!r} in the URL's path: percent-encode it"
            )
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):  # the OpenAI base-URL habit: our paths start with /v1
            path = path[: -len("/v1")]
        return cls(parts.scheme, parts.hostname, port, path)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


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
    def request_departed(self) -> bool:
        """Whether the current request's send time is its departure seen by the tap
        (``StampedSocket.departure_ns``)."""
        return self._request_socket is not None and self._request_socket.departed

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
        """The next piece of what arrived (b"" at end of stream) and its arrival (the stamp
        clock, ``common.clock``): its segment's kernel stamp, or its read's, else the time
        the read returned (``StampedSocket``).

        Raises ``ReadTimeout`` (nothing before ``deadline.at_ns``),
        ``ConnectionResetError`` (reset, broken pipe, aborted) or ``StreamError`` (any
        other socket error, as ``connection_error``).
        """
        stamped = self._stamped
        if stamped is None:
            return b"", stamp_ns()
        if stamped.pending:
            return stamped.pending.popleft()
        timeout = deadline.timeout_s(stamp_ns())
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

    def ack_on_arrival(self, on: bool) -> None:
        """Have the kernel acknowledge each segment as it arrives, read or not (``on``:
        while a body is read in batches), or as it does by default
        (``StampedSocket.ack_on_arrival``)."""
        if self._stamped is not None:
            self._stamped.ack_on_arrival(on)

    @property
    def segment_key(self) -> int | None:
        """The tap's key for this plain-TCP connection (``StampedSocket.segment_key``)."""
        return None if self._stamped is None else self._stamped.segment_key

    def data_waiting(self) -> bool:
        """The tap saw data come that was not read yet (``StampedSocket.data_waiting``)."""
        return self._stamped is None or self._stamped.data_waiting()

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
        """Send a request; returns the response head and when the request left
        (the stamp clock: the segment tap's stamp of its first segment, where this
        connection has the tap; else just before the send: ``departure_ns``).

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
            send_ns = stamp_ns()
            stamped.sent_at(send_ns)
            deadline.start(send_ns)
            try:
                stamped.send(message, max(deadline.timeout_s(send_ns), 0.001))
                response = self._read_head(deadline)
                return response, stamped.departure_ns(send_ns)
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
        stamp = stamp_ns()
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


_RESOLVED: dict[tuple[str, int], tuple[int, tuple[object, ...]]] = {}


def resolve(host: str, port: int) -> tuple[int, tuple[object, ...]]:
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


class _EmptyHead(Exception):
    """The peer closed before sending a single response byte."""
