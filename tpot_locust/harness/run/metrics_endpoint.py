"""``--tpot-metrics-address``: the live metrics page (``report.live_metrics``) on a port of
its own, served by the master (or a single process) while a run goes.

A port of its own, not a route of the web UI: a headless master has no web UI, and a
scraper needs no login. It serves one read-only page, ``GET /metrics``, made once per
report interval; nothing a request sends is read beyond its method and path. It listens
on 127.0.0.1 unless the person starting the run names another address (``0.0.0.0:9464``
in a container whose port is published).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gevent.pywsgi import WSGIServer

from tpot_locust.common.checked_numbers import option_number
from tpot_locust.report.live_metrics import CONTENT_TYPE

logger = logging.getLogger(__name__)
METRICS_PATH = "/metrics"
DEFAULT_HOST = "127.0.0.1"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def parse_address(text: str) -> tuple[str, int]:
    """``PORT`` (on 127.0.0.1) or ``HOST:PORT`` (``[::1]:PORT`` for IPv6): an argparse
    type, so anything else is a usage error (exit 2) before the run starts."""
    host, colon, port = text.strip().rpartition(":")
    if not colon:
        host, port = DEFAULT_HOST, text.strip()
    host = host.strip("[]")
    if not host or any(c.isspace() or c in "/@?#" for c in host):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: give PORT or HOST:PORT (0.0.0.0:PORT for every interface)"
        )
    return host, int(option_number(1, 65535, whole=True)(port))


class MetricsEndpoint:
    """A WSGI server of the latest page; ``update`` swaps the page in whole."""

    def __init__(self, host: str, port: int) -> None:
        self.page = b"# no report interval has ended yet\n"
        self.server = WSGIServer((host, port), self._app, log=None, error_log=logger)

    def start(self) -> None:
        self.server.start()  # binds now: a port in use fails the start, not a later scrape
        host, port = self.server.address[:2]
        logger.info("tpot-locust: live metrics on http://%s:%s%s", host, port, METRICS_PATH)

    @property
    def port(self) -> int:
        return int(self.server.address[1])

    def update(self, page: bytes) -> None:
        self.page = page

    def stop(self) -> None:
        self.server.stop(timeout=1)

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
        if path != METRICS_PATH:
            return _answer(start_response, "404 Not Found", b"only /metrics is here\n")
        if method not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"GET /metrics\n")
        page = self.page
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(page)))]
        )
        return [b""] if method == "HEAD" else [page]


def _answer(start_response: StartResponse, status: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
