"""A loopback HTTP server that answers every request with one hostile behaviour.

``endless``: a 200 whose body never ends; ``trickle``: one byte of a 200 answer every
``interval_s``; ``trickle_body``: a 200 head at once, without Content-Length (a body read
to the close), then one byte of it every ``interval_s``; ``not_json``: a 200 with an HTML
page. For the supervisor's own requests (``sweep --master-url``, health checks), which must
each end within their bounds.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

BEHAVIOURS = ("endless", "trickle", "trickle_body", "not_json")


@contextmanager
def hostile_http(behaviour: str, interval_s: float = 5.0) -> Iterator[str]:
    """Serve ``behaviour`` on 127.0.0.1 until the block ends; yields the server's URL."""
    assert behaviour in BEHAVIOURS
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if behaviour == "endless":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
                    chunk = b"1," * 32768
                    while not stop.is_set():
                        conn.sendall(chunk)
                elif behaviour == "trickle":
                    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}":
                        if stop.wait(interval_s):
                            return
                        conn.sendall(bytes([byte]))
                elif behaviour == "trickle_body":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                    )
                    while not stop.wait(interval_s):
                        conn.sendall(b"#")
                else:
                    body = b"<html>not a Locust web UI</html>"
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        server.close()
        time.sleep(0.05)
