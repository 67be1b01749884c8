"""A loopback HTTP server that plays a script of timed writes, for client edge cases.

Each accepted connection reads one request head+body, then performs the steps of the
script: ``(delay_s, bytes)`` writes, then closes (or resets) the socket. Used where the
simulator cannot misbehave on purpose (truncation, resets, exact write timing). Also the
chunks (``token``, ``FINISH``, ``DONE``) and the request the client tests share.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tpot_locust.common.clock import stamp_ns
from tpot_locust.wire.streaming import StreamRequest


@dataclass
class Script:
    steps: list[tuple[float, bytes]]
    reset: bool = False  # end with an RST instead of a FIN
    keep_open_s: float = 0.0  # linger before closing (keep-alive tests)
    write_ns: list[int] = field(default_factory=list)  # each write (the stamp clock)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def sse_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )


def token(text: str, finish: str | None = None) -> bytes:
    event = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return chunk(b"data: " + json.dumps(event).encode() + b"\n\n")


FINISH = chunk(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n')


DONE = chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def request(**overrides: float) -> StreamRequest:
    values: dict[str, float] = dict(first_token_timeout=5.0, idle_timeout=5.0, total_timeout=30.0)
    values.update(overrides)
    return StreamRequest(
        user_class="Test",
        api="chat",
        request_id="r1",
        path="/v1/chat/completions",
        headers={"Content-Type": "application/json"},
        body=b"{}",
        prompt_tokens_requested=5,
        t_intended_ns=stamp_ns(),
        **values,
    )


def _read_request(conn: socket.socket) -> bool:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return False
        buffer += data
    head, _, body = buffer.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(body) < length:
        body += conn.recv(65536)
    return True


@contextmanager
def scripted_server(scripts: list[Script]) -> Iterator[str]:
    """Serve one script per connection, in order; yields the base URL."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]

    def play(conn: socket.socket, script: Script) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not _read_request(conn):
            conn.close()
            return
        start = time.perf_counter()
        try:
            for delay_s, data in script.steps:
                target = start + delay_s
                while (remaining := target - time.perf_counter()) > 0:
                    time.sleep(min(remaining, 0.0005))
                script.write_ns.append(stamp_ns())
                conn.sendall(data)
            time.sleep(script.keep_open_s)
        except OSError:
            pass  # the client gave up (a timeout test)
        if script.reset:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    def serve() -> None:
        for script in scripts:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=play, args=(conn, script), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        listener.close()
        thread.join(timeout=5)
