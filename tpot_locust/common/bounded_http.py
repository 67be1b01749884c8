"""One HTTP exchange of the supervisor's, bounded in time and size (not the measuring path).

``urllib``'s timeout is per socket operation: a server that sends a byte every few seconds,
or a body without end, holds a caller for ever and fills its memory. Here the whole exchange
(connect, head, body) has one deadline, enforced by shutting the socket down from a timer
thread, and the body a size cap. For plain blocking code: the CLI, health checks.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.parse
from dataclasses import dataclass

DEFAULT_TOTAL_S = 20.0
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_READ = 64 * 1024


class ExchangeError(OSError):
    """The exchange broke a bound (deadline, size) or the connection failed; says which."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    body: bytes


def exchange(
    url: str,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    total_s: float = DEFAULT_TOTAL_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Answer:
    """GET ``url`` (POST with ``data``); the whole answer within ``total_s`` seconds and
    ``max_bytes`` of body, or ``ExchangeError``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ExchangeError(f"not an http(s) URL: {url}")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=total_s)
    expired = threading.Event()
    # The socket is ours to cut: http.client drops ``connection.sock`` while it reads a
    # body without Content-Length (read to the close), and a trickle then held the read
    # for ever, each byte restarting the per-read timeout.
    sockets: list[socket.socket] = []
    timer = threading.Timer(total_s, _cut, (sockets, expired))
    timer.daemon = True
    timer.start()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        connection.connect()  # bounded by the timeout, the deadline's at most
        if connection.sock is not None:
            sockets.append(connection.sock)
        if expired.is_set():  # the deadline came as the connection was made
            raise TimeoutError
        connection.request("POST" if data is not None else "GET", path, data, headers or {})
        response = connection.getresponse()
        body = _read_capped(response, max_bytes)
        if expired.is_set():
            raise TimeoutError
        return Answer(response.status, response.reason, body)
    except (OSError, http.client.HTTPException) as error:
        if expired.is_set():
            raise ExchangeError(f"no complete answer within {total_s:g} s") from None
        if isinstance(error, ExchangeError):
            raise
        raise ExchangeError(str(getattr(error, "strerror", None) or error)) from None
    finally:
        timer.cancel()
        connection.close()


def _read_capped(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    pieces, size = [], 0
    while piece := response.read1(_READ) if hasattr(response, "read1") else response.read(_READ):
        size += len(piece)
        if size > max_bytes:
            raise ExchangeError(f"answer over {max_bytes / 2**20:g} MiB: refused")
        pieces.append(piece)
    return b"".join(pieces)


def _cut(sockets: list[socket.socket], expired: threading.Event) -> None:
    """At the deadline: wake the blocked read (shutdown does, from any thread)."""
    expired.set()
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
