"""Routes and lifecycle of the simulated OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import signal
import socket
import ssl
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..common.clock import WallClock
from ..common.distributions import Distribution, Fixed, LogNormal
from .engine_front import EngineFront
from .http import HttpConnection, HttpRequest, error_body, full_response
from .intake import RequestIntake
from .profiles import EngineParams
from .prometheus import CONTENT_TYPE, SimMetrics
from .request import Api, RequestError, SimRequest
from .response import ResponseSetup, StreamedResponse
from .routes import API_BY_PATH, MODELS_BY_PATH, ROUTES
from .scheduler import Scheduler
from .stream import Stream
from .timing import GapModel, TimingModel
from .truth import TruthWriter

LARGE_BODY = 32 * 1024  # request bodies decoded one per loop iteration (long prompts)


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "tpot-sim"
    adapters: tuple[str, ...] = ()  # LoRA adapters served beside ``model`` (sim.adapters)
    ttft_ms: Distribution = field(default_factory=lambda: Fixed(20.0))
    gap_ms: Distribution = field(default_factory=lambda: Fixed(2.0))
    natural_tokens: Distribution = field(default_factory=lambda: LogNormal(400.0, 200.0))
    seed: int = 0
    default_max_tokens: int = 256
    truth_path: Path | None = None
    truth_kernel_sends: bool = True  # the truth's sends by the kernel's stamps (send_stamps)
    engine: EngineParams | None = None  # None: independent per-stream gaps (GapModel)
    steps_path: Path | None = None  # engine step lines; None: into the truth file
    timer_lead_us: int = 1000  # engine steps: wake this early at most, then spin to the time
    tokenizer_path: Path | None = None  # prompts counted with it; None: in words
    tls_cert: Path | None = None  # https with this certificate and key (PEM); None: http
    tls_key: Path | None = None
    prefix_cache: bool = False  # prompts looked up in a prefix cache (sim.prefix_cache)
    # reasoning tokens before each answer, drawn per request; None: none
    reasoning_tokens: Distribution | None = None
    # a non-token event of this many bytes after every filler_every-th token (0: none)
    filler_bytes: int = 0
    filler_every: int = 16


class SimServer:
    """Listens, routes requests and owns the shared scheduler, clock and truth writer."""

    def __init__(self, config: SimConfig, timing: TimingModel | None = None) -> None:
        self.config = config
        self._intake = RequestIntake(
            model=config.model,
            adapters=config.adapters,
            default_max_tokens=config.default_max_tokens,
            natural_tokens=config.natural_tokens,
            reasoning_tokens=config.reasoning_tokens,
            seed=config.seed,
            tokenizer_path=config.tokenizer_path,
            prefix_cache=config.prefix_cache,
            engine=config.engine,
        )
        self.timing: TimingModel = timing or GapModel(config.ttft_ms, config.gap_ms, config.seed)
        self.clock = WallClock()
        self._connections: set[HttpConnection] = set()
        self._streams: set[StreamedResponse] = set()
        self._server: asyncio.AbstractServer | None = None
        self._scheduler: Scheduler | None = None
        self._truth: TruthWriter | None = None
        self._steps: TruthWriter | None = None  # a separate step log (--steps)
        self.engine: EngineFront | None = None
        profile = config.engine.name if config.engine is not None else "gap mode"
        self.metrics = SimMetrics(config.model, profile)
        # gap mode: every stream in flight runs, nothing waits, no KV cache, no preemption
        self.metrics.bind(running=lambda: len(self._streams), in_flight=lambda: self._streams)
        self._created = int(time.time())
        self._large: deque[tuple[HttpConnection, HttpRequest, Api, int]] = deque()
        self.url = ""

    async def start(self) -> str:
        """Bind and listen; returns the base URL (with the real port when port 0 was asked)."""
        loop = asyncio.get_running_loop()
        self._scheduler = Scheduler(loop)
        self._truth = TruthWriter(self.config.truth_path, loop)
        if self.config.engine is not None:
            if self.config.steps_path is not None:
                self._steps = TruthWriter(self.config.steps_path, loop)
            self.engine = EngineFront(
                loop,
                self.config.engine,
                model=self.config.model,
                seed=self.config.seed,
                offset_ns=self.clock.offset_ns,
                steps_out=self._steps or self._truth,
                max_lead_ns=self.config.timer_lead_us * 1000,
                metrics=self.metrics,
                in_flight=self._streams,
            )
        tls = None
        if self.config.tls_cert is not None:
            tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            tls.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        stamp_sends = self._truth.enabled and self.config.truth_kernel_sends
        self._server = await loop.create_server(
            lambda: HttpConnection(
                self._handle, self._connections, self._kernel_to_perf, stamp_sends=stamp_sends
            ),
            self.config.host,
            self.config.port,
            backlog=1024,
            reuse_address=True,
            ssl=tls,
        )
        sock = self._server.sockets[0]
        host, port = sock.getsockname()[:2]
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        elif sock.family == socket.AF_INET6:
            host = f"[{host}]"
        self.url = f"{'https' if tls else 'http'}://{host}:{port}"
        return self.url

    def _kernel_to_perf(self, wall_ns: int) -> int:
        """A kernel receive stamp on the loop's clock (the truth's offset: exact both ways)."""
        return wall_ns - self.clock.offset_ns

    async def close(self) -> None:
        """Stop listening, record in-flight requests as aborted, close connections, flush."""
        if self._server is not None:
            self._server.close()
        for stream in list(self._streams):
            stream.abort()
        for conn in list(self._connections):
            conn.close()
        if self._scheduler is not None:
            self._scheduler.close()
        if self.engine is not None:
            self.engine.close()
        if self._truth is not None:
            self._truth.close()
        if self._steps is not None:
            self._steps.close()
        self._intake.close()
        await asyncio.sleep(0)  # let transports run connection_lost

    # -- routing -----------------------------------------------------------------------------

    def _handle(self, conn: HttpConnection, request: HttpRequest) -> None:
        method = ROUTES.get(request.path)
        if method is None:
            self._error(conn, request, 404, f"no route for {request.path}")
        elif request.method != method:
            message = f"{request.method} not allowed on {request.path}; use {method}"
            self._error(conn, request, 405, message, [("allow", method)])
        elif request.path == "/health":
            keep = request.keep_alive
            conn.respond(full_response(200, b"", keep, "text/plain"), keep)
        elif request.path == "/metrics":
            keep = request.keep_alive
            conn.respond(full_response(200, self.metrics.render(), keep, CONTENT_TYPE), keep)
        elif request.path == "/dcgm/metrics":
            self._dcgm(conn, request)
        elif request.path in MODELS_BY_PATH:
            keep = request.keep_alive
            conn.respond(full_response(200, self._models_body(request.path), keep), keep)
        else:
            api: Api = API_BY_PATH[request.path]
            if len(request.body) < LARGE_BODY:
                self._completion(conn, request, api, request.arrival_ns)
                return
            # Decoding a long prompt takes ~1 ms: a burst of them decoded in one loop
            # iteration delayed every stream's next token, interference the simulator in
            # gap mode must not make. One per iteration lets due tokens go out in between.
            self._large.append((conn, request, api, request.arrival_ns))
            if len(self._large) == 1:
                asyncio.get_running_loop().call_soon(self._next_large)

    def _dcgm(self, conn: HttpConnection, request: HttpRequest) -> None:
        """The engine's GPU as a DCGM exporter shows it (``sim.dcgm``); gap mode has none."""
        if self.engine is None:
            self._error(conn, request, 404, "no GPU in gap mode: run with --profile")
            return
        keep = request.keep_alive
        conn.respond(full_response(200, self.engine.dcgm_page(), keep, CONTENT_TYPE), keep)

    def _next_large(self) -> None:
        if self._intake.reads_apart:
            self._count_apart(*self._large.popleft())
        else:
            self._completion(*self._large.popleft())
        if self._large:
            asyncio.get_running_loop().call_soon(self._next_large)

    def _count_apart(
        self, conn: HttpConnection, http_request: HttpRequest, api: Api, arrival: int
    ) -> None:
        """Parse and count a large body on the counting thread; admit it back on the loop."""
        request_id = _request_id(http_request)
        future = self._intake.read_apart(http_request.body, api, arrival, request_id)
        future.add_done_callback(partial(self._counted, conn, http_request))

    def _counted(
        self, conn: HttpConnection, http_request: HttpRequest, future: asyncio.Future[SimRequest]
    ) -> None:
        if conn.closing:
            return  # the client went away while its prompt was counted
        try:
            request = future.result()
        except RequestError as exc:
            self._error(conn, http_request, exc.status, exc.message)
            return
        self._admit(conn, http_request, request)

    def _error(
        self,
        conn: HttpConnection,
        request: HttpRequest,
        status: int,
        message: str,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        keep = request.keep_alive
        conn.respond(
            full_response(status, error_body(status, message), keep, headers=headers or ()), keep
        )

    def _models_body(self, path: str) -> bytes:
        listing = MODELS_BY_PATH[path].sim_models(
            self.config.model, self._created, self.config.adapters
        )
        return json.dumps(listing).encode("utf-8")

    def _completion(
        self, conn: HttpConnection, http_request: HttpRequest, api: Api, arrival: int
    ) -> None:
        request_id = _request_id(http_request)
        try:
            request = self._intake.read(http_request.body, api, arrival, request_id)
        except RequestError as exc:
            self._error(conn, http_request, exc.status, exc.message)
            return
        self._admit(conn, http_request, request)

    def _admit(self, conn: HttpConnection, http_request: HttpRequest, request: SimRequest) -> None:
        try:
            response_id = self._intake.admit(request)
        except RequestError as exc:
            self._error(conn, http_request, exc.status, exc.message)
            return
        assert self._scheduler is not None
        if self.engine is not None:
            setup = self._setup(http_request, response_id, self.engine.ended)
            self.engine.submit(conn, request, setup)
            return
        setup = self._setup(http_request, response_id, self._stream_end)
        stream = Stream(conn, request, setup, self.timing)
        self._streams.add(stream)
        self._scheduler.add(stream, stream.start())

    def _setup(
        self, http_request: HttpRequest, response_id: str, on_end: Callable[[Any, bool], None]
    ) -> ResponseSetup:
        """What every response of this server is told besides its request."""
        assert self._truth is not None
        config = self.config
        return ResponseSetup(
            self.clock,
            self._truth,
            http_request.keep_alive,
            response_id,
            on_end,
            self.metrics,
            config.filler_bytes,
            config.filler_every,
        )

    def _stream_end(self, stream: Stream, aborted: bool) -> None:
        self._streams.discard(stream)


def _request_id(http_request: HttpRequest) -> str:
    """The client's ``X-Request-Id`` (the truth lines are matched by it), else a fresh one."""
    return http_request.headers.get("x-request-id") or uuid.uuid4().hex


async def serve(config: SimConfig, on_ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGTERM/SIGINT, then shut down cleanly (truth flushed)."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_ShortLoopErrors())
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = SimServer(config)
    try:
        url = await server.start()
        gc.freeze()  # startup objects never need collecting: keeps full collections short
        if on_ready is not None:
            on_ready(url)
        await stop.wait()
    finally:
        await server.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


class _ShortLoopErrors:
    """The event loop's own errors as one line each, a kind at most once a second: out of
    file descriptors (100,000 connections of a burst), asyncio logged each failed accept
    with its traceback, 1,024 of them."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        error = context.get("exception")
        message = str(context.get("message") or "event loop error")
        kind = type(error).__name__ if error is not None else message
        now = time.monotonic()
        if now - self._last.get(kind, -math.inf) < 1.0:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return
        self._last[kind] = now
        skipped = self._skipped.pop(kind, 0)
        more = f" (and {skipped} more like it)" if skipped else ""
        detail = f": {error}" if error is not None else ""
        print(f"tpot-sim: {message}{detail}{more}"[:300], file=sys.stderr, flush=True)
