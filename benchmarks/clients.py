"""The clients a benchmark case streams with, by mode: ours (the package's hot path, as a
Locust worker runs it, on each of its clocks and read paths) and the straightforward
``baseline_client``; and the chat request they send.

Scripts that stream call ``gevent.monkey.patch_all()`` before importing this module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Protocol

from baseline_client import BaselineClient, Sent
from hdrh.histogram import HdrHistogram

from tpot_locust.common.clock import KERNEL_CLOCK, USER_CLOCK, stamp_ns
from tpot_locust.harness.watch import loop_yield
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.wire import loop_reads
from tpot_locust.wire.http_client import HTTPConnection
from tpot_locust.wire.segment_stamps import arrival_clock
from tpot_locust.wire.streaming import StreamRequest, stream_request

try:  # with the other events; an older tree's (an A/B) in the harness, or none at all
    from tpot_locust.events import PrefillWindow
except ImportError:
    try:
        from tpot_locust.harness.prefill_events import PrefillWindow
    except ImportError:
        PrefillWindow = None

loop_yield.install()  # aggregation yields to gevent's loop, as in a Locust process's run


# ours: the package's default clock (segment stamps where this process may open the tap,
# else kernel receive stamps); ours-kernel: kernel receive stamps only (a read's newest
# segment, TPOT_LOCUST_STAMPS=kernel); ours-user: the same code stamping with
# perf_counter_ns after each read returns (TPOT_LOCUST_STAMPS=user); ours-greenlet: ours,
# with each stream's greenlet reading its socket instead of the event loop's callback
# (loop_reads.ENABLED = False: how it was before); ours-batched: ours with the bodies read
# once every 10 ms (TPOT_LOCUST_READ_BATCH_MS=10); ours-batched-N: every N ms; ours-at-once:
# each ready socket read at once (TPOT_LOCUST_READ_BATCH_MS=0; ours reads in 40 ms batches
# by default since issue 45)
MODES = (
    "ours",
    "ours-kernel",
    "ours-user",
    "ours-greenlet",
    "ours-batched",
    "ours-at-once",
    "baseline",
)
BATCHED_READ_S = 0.01
_CLOCKS = {"ours-kernel": KERNEL_CLOCK, "ours-user": USER_CLOCK}


class Client(Protocol):
    name: str
    clock: str  # the arrival clock of its connections (common.clock's names)

    def request(self, connection: HTTPConnection, request: StreamRequest) -> Sent: ...

    def report(self, final: bool = False) -> None: ...

    def tpot(self) -> HdrHistogram: ...

    def read_delays(self) -> HdrHistogram | None: ...


class _Hook:
    """An event hook of one listener, as ``prefill_window`` is for a worker's recorder."""

    def __init__(self, listener: Callable[..., None]) -> None:
        self.fire = listener


class OursClient:
    """``stream_request`` + ``Recorder``: the package's hot path, as a Locust worker runs it."""

    def __init__(self, name: str = "ours") -> None:
        self.name = name
        self.clock = _CLOCKS.get(name) or arrival_clock()
        self.in_loop = name != "ours-greenlet"
        self.read_batch_s = batch_period_s(name)  # None: the default
        self.recorder = Recorder()
        self.total = MetricSet()

    def request(self, connection: HTTPConnection, request: StreamRequest) -> Sent:
        if loop_reads.ENABLED != self.in_loop or self.read_batch_s != _batch_in_use[0]:
            loop_reads.ENABLED = self.in_loop
            loop_reads.use_read_batch(self.read_batch_s)
            _batch_in_use[0] = self.read_batch_s
        window = None
        if PrefillWindow is not None:  # as ChatUser: opened at the send, closed at the first token
            hook = _Hook(self.recorder.on_prefill)
            window = PrefillWindow(hook, request.request_id, request.prompt_tokens_requested, False)
            request = dataclasses.replace(request, on_first_token=window.first_token)
        request = dataclasses.replace(request, live=self.recorder.token_flow)  # as ChatUser
        timings, _ = stream_request(connection, request)
        if window is not None:
            window.end(timings.token_stamps[0] if timings.token_stamps else None)
        self.recorder.record(timings)
        stamps = timings.token_stamps
        return Sent(
            request.request_id,
            timings.ok,
            timings.t_send_ns,
            stamps[0] if stamps else None,
            len(stamps),
            stamps=stamps,
        )

    def report(self, final: bool = False) -> None:
        delta = self.recorder.take_interval(final=final)
        delta.encode(cooperative=True)  # what a worker ships to the master
        self.total.add(delta, cooperative=True)

    def tpot(self) -> HdrHistogram:
        return self.total.combined().histogram("tpot")

    def read_delays(self) -> HdrHistogram | None:
        """The package's own read-delay metric (None on the user clock: no samples)."""
        histogram = self.total.combined().histogram("read_delay")
        return histogram if histogram.total_count else None


_batch_in_use: list[float | None] = [None]  # the read batch the last request of a case used


def batch_period_s(mode: str) -> float | None:
    """The read batch period of ``ours-batched`` (10 ms) or ``ours-batched-N`` (N ms), 0 for
    ``ours-at-once``; None (the default) for the other modes."""
    if mode == "ours-at-once":
        return 0.0
    if not mode.startswith("ours-batched"):
        return None
    period_ms = mode.removeprefix("ours-batched").removeprefix("-")
    return float(period_ms) / 1000 if period_ms else BATCHED_READ_S


def make_client(mode: str) -> Client:
    if mode == "baseline":
        return BaselineClient()
    return OursClient(mode)


def chat_request(request_id: str, tokens: int, prompt_words: int = 32) -> StreamRequest:
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hello " * prompt_words}],
    }
    return StreamRequest(
        user_class="bench",
        api="chat",
        request_id=request_id,
        path="/v1/chat/completions",
        headers={"Content-Type": "application/json", "X-Request-Id": request_id},
        body=json.dumps(body).encode(),
        prompt_tokens_requested=prompt_words,
        first_token_timeout=60,
        idle_timeout=60,
        total_timeout=600,
        t_intended_ns=stamp_ns(),
    )
