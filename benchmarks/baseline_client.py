"""The straightforward client: what a first version of the per-event path would do.

Same socket reading as ``tpot_locust.wire.streaming`` (``HTTPConnection.request``,
``Response.read_into``, ``SSEParser``; each event stamped with the arrival time of the read
that completed it), but per event, as it arrives: ``json.loads`` of the whole chunk, the
token test, usage parsing, and one ``HdrHistogram.record_value`` per token for TPOT and one
for ITL (pure Python, ~2 us each). Only the per-event work differs from ours, so the
difference in CPU per event and in accuracy under load is the cost of that work.

Used by ``accuracy.py`` and ``capacity.py`` with ``--baseline``; not part of the package.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple

from hdrh.histogram import HdrHistogram

from tpot_locust.common.clock import USER_CLOCK
from tpot_locust.metrics.histograms import add_into, new_histogram
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.http_client import HTTPConnection, ReadTimeout
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.streaming import StreamRequest

BASELINE_METRICS = ("tpot", "itl", "ttft", "e2e", "request_tpot", "worst_gap")


class Sent(NamedTuple):
    """One finished request as the benchmarks see it (either client).

    A tuple of plain values: the cycle collector stops tracking it, so the thousands a run
    keeps do not lengthen the collections (pauses) of the process being measured."""

    request_id: str
    ok: bool
    t_send_ns: int
    first_ns: int | None  # arrival of the first token event
    events: int  # token events
    t_call_ns: int = 0  # when the request was started, before any connect
    stamps: Sequence[int] | None = None  # token event stamps, until run_streams counts them
    events_in_window: int = 0  # token events that arrived before the run's stop time
    sequence: int = 0  # its place on its stream: 0 is the first (it opens the connection)


class _Seen:
    """What the events of one stream told so far."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.previous: int | None = None
        self.events = self.worst = 0
        self.stamps: list[int] = []
        self.finish_reason: str | None = None
        self.completion_tokens: int | None = None
        self.done = False


class _ErrorEvent(Exception):
    """The server sent an error event: the request failed."""


def _us(ns: float) -> int:
    return max(int((ns + 500) // 1000), 0)


class BaselineClient:
    """Per-event JSON decoding and per-token ``record_value``; ships deltas like a worker."""

    name = "baseline"
    clock = USER_CLOCK  # perf_counter_ns when each read returns, as a plain client stamps

    def __init__(self) -> None:
        self.interval: dict[str, HdrHistogram] = {m: new_histogram() for m in BASELINE_METRICS}
        self.total: dict[str, HdrHistogram] = {m: new_histogram() for m in BASELINE_METRICS}

    def request(self, connection: HTTPConnection, request: StreamRequest) -> Sent:
        try:
            return self._request(connection, request)
        except Exception:  # noqa: BLE001 - counted as failed, like stream_request does
            connection.close()
            return Sent(request.request_id, False, 0, None, 0)

    def _request(self, connection: HTTPConnection, request: StreamRequest) -> Sent:
        deadline = Deadline(
            request.first_token_timeout, request.idle_timeout, request.total_timeout
        )
        response, t_send = connection.request(
            "POST", request.path, request.headers, request.body, deadline
        )
        if response.status != 200 or "text/event-stream" not in response.content_type:
            response.read(limit=65536)
            return Sent(request.request_id, False, t_send, None, 0)
        parser = SSEParser()
        seen = _Seen()

        def consume(stamp: int, data: bytes) -> None:
            for payload in parser.feed(data):
                if payload == b"[DONE]":
                    seen.done = True
                    continue
                event = json.loads(payload)  # every event, as it arrives
                if event.get("error"):
                    raise _ErrorEvent()
                usage = event.get("usage")
                if isinstance(usage, dict) and "completion_tokens" in usage:
                    seen.completion_tokens = usage["completion_tokens"]
                choices = event.get("choices") or []
                if not choices:
                    continue
                choice = choices[0]
                delta = choice.get("delta") or {}
                if (
                    delta.get("content")
                    or delta.get("reasoning_content")
                    or delta.get("tool_calls")
                ):
                    if seen.previous is None:
                        seen.first = stamp
                    else:
                        gap = _us(stamp - seen.previous)
                        histograms = self.interval  # swapped every report interval
                        histograms["tpot"].record_value(gap)  # one token per event here
                        histograms["itl"].record_value(gap)
                        seen.worst = max(seen.worst, gap)
                    seen.previous = stamp
                    seen.stamps.append(stamp)
                    seen.events += 1
                if choice.get("finish_reason"):
                    seen.finish_reason = choice["finish_reason"]
            deadline.arrived(stamp)

        try:
            response.read_into(consume)
        except _ErrorEvent:
            connection.close()
            return Sent(request.request_id, False, t_send, seen.first, seen.events)
        except ReadTimeout:
            connection.close()
            if not seen.done:
                return Sent(request.request_id, False, t_send, seen.first, seen.events)
        first, previous, events = seen.first, seen.previous, seen.events
        if seen.finish_reason is None or first is None or previous is None:
            return Sent(request.request_id, False, t_send, first, events)
        histograms = self.interval
        histograms["ttft"].record_value(_us(first - t_send))
        histograms["e2e"].record_value(_us(previous - t_send))
        tokens = seen.completion_tokens if seen.completion_tokens is not None else events
        if events > 1 and tokens > 1:
            histograms["request_tpot"].record_value(_us((previous - first) / (tokens - 1)))
            histograms["worst_gap"].record_value(seen.worst)
        return Sent(request.request_id, True, t_send, first, events, stamps=seen.stamps)

    def report(self, final: bool = False) -> None:
        """Every report interval: swap in fresh histograms (``HdrHistogram.reset`` zeroes
        its 23,552 counters in a Python loop: ~4 ms each), encode the finished delta (what
        a worker ships) and add it up."""
        finished = self.interval
        self.interval = {m: new_histogram() for m in BASELINE_METRICS}
        for name, histogram in finished.items():
            if histogram.total_count:
                histogram.encode()
                add_into(self.total[name], histogram)

    def tpot(self) -> HdrHistogram:
        return self.total["tpot"]

    def read_delays(self) -> HdrHistogram | None:
        return None  # user-clock reads: no kernel stamp to measure the delay from
