"""A loopback OpenAI-style streaming server whose replies are hostile, for issue 25's tests.

Where ``fault_server`` breaks the transport (resets, stalls, bad framing), this one sends
well-formed HTTP whose *content* is hostile: numbers no request can have, the request's
own credentials echoed back, a models list trickled a byte a second, redirects, compressed
or HTML bodies served as event streams.

Each completion request takes the next reply of ``replies`` (cycled; a request's
``X-Hostile`` header names one instead):

- ``good``: a normal stream (role chunk, ``tokens`` content chunks, finish, usage, [DONE]);
- ``huge_usage``: the same stream whose usage says ``completion_tokens`` is a 400-digit
  integer (once an ``OverflowError`` at the run's end that lost every result);
- ``echo_headers``: HTTP 400 whose error message repeats every request header, values
  included (servers do this);
- ``echo_event``: a 200 stream with a token, then an error event repeating the headers;
- ``redirect``: HTTP 307 to another host; ``gzip``: a gzip-compressed event stream;
  ``html``: an HTML page served as ``text/event-stream``; ``unicode_length``: a body with
  ``Content-Length: ²``.

``GET /v1/models`` answers at once, or with ``models="trickle"`` a byte every
``trickle_s`` (a lookup that never ends for a client without a total deadline).
``stats`` counts the replies sent by kind.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections import Counter
from itertools import cycle
from typing import Any

MODEL = "hostile-model"
HUGE = 10**399 + 7  # 400 digits
REPLIES = (
    "good",
    "huge_usage",
    "echo_headers",
    "echo_event",
    "redirect",
    "gzip",
    "html",
    "unicode_length",
)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(data: dict[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    return b"data: " + payload.encode() + b"\n\n"


def delta(content: str | None, finish: str | None = None) -> dict[str, Any]:
    fields = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": fields, "finish_reason": finish}
    return {"id": "h", "object": "chat.completion.chunk", "model": MODEL, "choices": [choice]}


def stream_events(tokens: int, completion_tokens: int) -> list[bytes]:
    """A whole vLLM-style stream's events; usage says ``completion_tokens``."""
    events = [event(delta("")), *(event(delta(f" w{i}")) for i in range(tokens))]
    events.append(event(delta(None, "length")))
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": completion_tokens,
        "total_tokens": 5 + completion_tokens,
    }
    events.append(event({"id": "h", "model": MODEL, "choices": [], "usage": usage}))
    events.append(event("[DONE]"))
    return events


def head(status: str, *headers: str) -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers]) + "\r\n\r\n").encode("latin-1")


SSE_HEAD = ("Content-Type: text/event-stream", "Transfer-Encoding: chunked")


class HostileStreamServer:
    """``with HostileStreamServer(replies=...) as server: ... server.url ... server.stats``."""

    def __init__(
        self,
        replies: tuple[str, ...] = ("good",),
        *,
        tokens: int = 4,
        models: str = "fast",
        trickle_s: float = 1.0,
    ) -> None:
        unknown = set(replies) - set(REPLIES)
        assert not unknown, unknown
        self.tokens = tokens
        self.models = models
        self.trickle_s = trickle_s
        self.stats: Counter[str] = Counter()
        self._replies = cycle(replies)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileStreamServer:
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._closed.set()
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        try:
            while not self._closed.is_set():
                request, buffer = _read_request(sock, buffer)
                if request is None:
                    return
                if not self._answer(sock, *request):
                    return
        except OSError:
            pass
        finally:
            sock.close()

    def _answer(self, sock: socket.socket, method: str, path: str, headers: dict[str, str]) -> bool:
        """Send one reply; whether the connection stays open for the next request."""
        if method == "GET" and path.endswith("/v1/models"):
            return self._models(sock)
        with self._lock:
            reply = headers.get("x-hostile") or next(self._replies)
            self.stats[reply] += 1
        if reply in ("good", "huge_usage"):
            completion = HUGE if reply == "huge_usage" else self.tokens
            body = b"".join(chunk(e) for e in stream_events(self.tokens, completion))
            sock.sendall(head("200 OK", *SSE_HEAD) + body + b"0\r\n\r\n")
            return True
        if reply == "echo_headers":
            echoed = "; ".join(f"{name}: {value}" for name, value in headers.items())
            body = json.dumps({"error": {"message": f"bad request with {echoed}"}}).encode()
            sock.sendall(
                head(
                    "400 Bad Request",
                    "Content-Type: application/json",
                    f"Content-Length: {len(body)}",
                )
                + body
            )
            return True
        if reply == "echo_event":
            echoed = "; ".join(f"{name}: {value}" for name, value in headers.items())
            events = [event(delta(" a")), event({"error": {"message": f"refused {echoed}"}})]
            sock.sendall(head("200 OK", *SSE_HEAD) + b"".join(chunk(e) for e in events))
            sock.sendall(b"0\r\n\r\n")
            return True
        sock.sendall(_odd_reply(reply, self.tokens))
        return False

    def _models(self, sock: socket.socket) -> bool:
        body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        reply = (
            head("200 OK", "Content-Type: application/json", f"Content-Length: {len(body)}")
            + body.encode()
        )
        with self._lock:
            self.stats[f"models_{self.models}"] += 1
        if self.models != "trickle":
            sock.sendall(reply)
            return True
        for byte in reply:  # the head too: a deadline per read never ends this
            if self._closed.wait(self.trickle_s):
                return False
            sock.sendall(bytes([byte]))
        return True


def _odd_reply(reply: str, tokens: int) -> bytes:
    """The replies that are no event stream we can read, each closing its connection."""
    if reply == "redirect":
        return head(
            "307 Temporary Redirect",
            "Location: http://elsewhere.invalid/v1/chat",
            "Content-Length: 0",
            "Connection: close",
        )
    if reply == "gzip":
        body = gzip.compress(b"".join(stream_events(tokens, tokens)))
        return (
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                "Content-Encoding: gzip",
                f"Content-Length: {len(body)}",
                "Connection: close",
            )
            + body
        )
    if reply == "html":
        body = b"<!DOCTYPE html><html><body><h1>Sign in</h1></body></html>"
        return (
            head(
                "200 OK",
                "Content-Type: text/event-stream",
                f"Content-Length: {len(body)}",
                "Connection: close",
            )
            + body
        )
    assert reply == "unicode_length", reply
    # "²" as the client decodes a head (latin-1): str.isdigit() says True, int() refuses
    return (
        head(
            "200 OK",
            "Content-Type: text/event-stream",
            "Content-Length: \u00b2",
            "Connection: close",
        )
        + b"xx"
    )


def _read_request(
    sock: socket.socket, buffer: bytes
) -> tuple[tuple[str, str, dict[str, str]] | None, bytes]:
    """One request (method, path, lower-cased headers) and the bytes after it."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None, b""
        buffer += data
    raw, _, rest = buffer.partition(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    method, path, *_ = lines[0].split(" ") + ["", ""]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            return None, b""
        rest += data
    time.sleep(0)  # let other connections' threads run between requests
    return (method, path, headers), rest[length:]
