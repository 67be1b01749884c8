"""A server's /metrics for tests, on 127.0.0.1: each answer (status, body, delay) chosen
per request by the test, so one class serves recorded texts, a 404, a sleep or garbage."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[int], tuple[int, bytes, float]]  # the n-th request (from 0) -> answer


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a slow handler still sleeping is not waited for

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/metrics"


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        n = self.server.requests
        self.server.requests += 1
        status, body, delay = self.server.answer(n)
        if delay:
            time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the sampler gave up on us
            pass

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def metrics_server(answer: Answer) -> Iterator[MetricsServer]:
    server = MetricsServer(answer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
