"""What every simulated response shares, whoever decides its timing.

``stream.Stream`` (gap mode: its own due times) and ``engine_stream.EngineStream`` (engine
mode: one write per engine step) differ only in *when* they write. The head, the
pre-encoded chunks of its API, the one-event body of a non-streaming response, the send stamps
and the truth line at the end (complete or aborted) live here, once.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..common.clock import WallClock
from ..common.sim_schedule import LATE_AFTER_NS
from .chunks import StreamEncoder, filler_chunk, full_body
from .http import HttpConnection, full_response, response_head
from .prometheus import ITL_BOUNDS_NS, ITL_FIRST_NS, SimMetrics
from .request import SimRequest
from .truth import TruthWriter, request_truth
from .vocab import ESCAPED

N_WORDS = len(ESCAPED)


@dataclass(frozen=True)
class ResponseSetup:
    """What the server tells each response besides the request itself."""

    clock: WallClock
    truth: TruthWriter
    keep_alive: bool
    response_id: str
    on_end: Callable[[Any, bool], None]  # (response, aborted): the server forgets it
    metrics: SimMetrics = field(default_factory=SimMetrics)  # the server's /metrics
    # a non-token event of this many bytes after every ``filler_every``-th token (0: none;
    # ``chunks.filler_chunk``)
    filler_bytes: int = 0
    filler_every: int = 16


class StreamedResponse:
    """One request from its head to its last write; subclasses decide when tokens go out."""

    __slots__ = (
        "active",
        "request",
        "_conn",
        "_write",
        "_encoder",
        "_clock",
        "_offset_ns",
        "_truth",
        "_keep_alive",
        "_on_end",
        "_response_id",
        "_created",
        "_send_ns",
        "_tokens",
        "_late",
        "_metrics",
        "_itl",
        "_sends",
        "_plain_lo",
        "_plain_hi",
        "_plain_chunk",
        "_filler",
        "_filler_every",
    )

    def __init__(self, conn: HttpConnection, request: SimRequest, setup: ResponseSetup) -> None:
        self.active = True
        self.request = request
        self._conn = conn
        self._write = conn.write
        self._clock = setup.clock
        self._offset_ns = setup.clock.offset_ns
        self._truth = setup.truth
        self._keep_alive = setup.keep_alive
        self._on_end = setup.on_end
        self._response_id = response_id = setup.response_id
        self._created = int(time.time())
        self._encoder = StreamEncoder(request, response_id, self._created)
        self._plain_lo, self._plain_hi, self._plain_chunk = self._encoder.plain()
        framing = self._encoder.framing
        self._filler = filler_chunk(framing, setup.filler_bytes) if setup.filler_bytes else b""
        self._filler_every = max(setup.filler_every, 1)
        self._send_ns: list[int] = []
        self._tokens: list[int] = []
        # [event index, us] for each token event that left over LATE_AFTER_NS after it was due
        self._late: list[list[int]] = []
        self._metrics = setup.metrics
        self._itl = setup.metrics.itl.counts
        self._sends = conn.send_stamps  # the kernel's transmit stamps, where kept
        if self._sends is not None:
            self._sends.begin()

    def _send_head(self) -> None:
        """Take over the connection; a streaming response sends its head at once."""
        self._conn.on_lost = self.abort  # connection_lost -> abort
        if self._conn.transport is not None and self._sends is None:
            self._write = self._conn.transport.write  # bypass the wrapper on the per-token path
        request = self.request
        if request.stream:
            headers = [("content-type", self._encoder.media_type), ("cache-control", "no-cache")]
            headers.append(("x-request-id", request.request_id))
            self._write(response_head(200, headers, self._keep_alive, chunked=True))

    def _token_chunk(self, index: int) -> bytes:
        """The chunk of token ``index`` (from 1), with the opening events before the first."""
        if self._filler and index % self._filler_every == 0:  # the token, then the filler
            return self._bare_token_chunk(index) + self._filler
        return self._bare_token_chunk(index)

    def _bare_token_chunk(self, index: int) -> bytes:
        if self._plain_lo < index < self._plain_hi and index > 1:  # nearly every token
            return self._plain_chunk(ESCAPED[(index - 1) % N_WORDS])
        chunk = self._encoder.content(ESCAPED[(index - 1) % N_WORDS], index)
        return self._encoder.opening() + chunk if index == 1 else chunk

    def _send(self, data: bytes, due_ns: int, tokens: int = 1, events: int = 1) -> int:
        """Write, and stamp the truth: ``events`` token events of ``tokens`` tokens each, the
        first due at ``due_ns`` (perf ns); returns when the write left (perf ns).

        The same stamps feed ``/metrics`` (TTFT, ITL, tokens), so the server's view is the truth.
        """
        send_ns = self._send_ns
        if self._sends is not None:  # when it left, by the kernel's stamp (``send_stamps``)
            now = self._sends.send(self._conn.transport, data, len(send_ns), events)
        else:
            now = time.perf_counter_ns()
            self._write(data)
        if now - due_ns > LATE_AFTER_NS:  # the simulator fell behind its own schedule
            self._late.append([len(send_ns), (now - due_ns) // 1000])
        stamp = now + self._offset_ns
        if send_ns:  # the ITL bucket; sum and count follow from the stamps (SimMetrics.render)
            gap = stamp - send_ns[-1]  # most gaps are under the first bound: no bisection
            self._itl[0 if gap <= ITL_FIRST_NS else bisect_left(ITL_BOUNDS_NS, gap)] += 1
        else:
            self._metrics.first_token(
                now - self.request.arrival_perf_ns, self.request.prompt_tokens
            )
        if events == 1:
            send_ns.append(stamp)
            self._tokens.append(tokens)
        else:
            self._itl[0] += events - 1  # one write: the later events' gaps are 0
            send_ns.extend([stamp] * events)
            self._tokens.extend([tokens] * events)
        return now

    def _late_too(self, index: int, due_ns: int, sent_ns: int) -> None:
        """Event ``index``, due at ``due_ns``, left at ``sent_ns`` in the write of an event
        before it (a wake late by a gap or more sends all that is due at once)."""
        if sent_ns - due_ns > LATE_AFTER_NS:
            self._late.append([index, (sent_ns - due_ns) // 1000])

    @property
    def last_send_perf_ns(self) -> int | None:
        """The last write's ``perf_counter_ns`` (None before the first)."""
        return self._send_ns[-1] - self._offset_ns if self._send_ns else None

    def sent(self) -> tuple[int, int]:
        """Token events sent so far and the ns from the first to the last (for /metrics)."""
        send_ns = self._send_ns
        return (len(send_ns), send_ns[-1] - send_ns[0]) if send_ns else (0, 0)

    def _send_whole(self, due_ns: int) -> None:
        """Non-streaming: all tokens reach the client in one body, when the last is due
        (at ``due_ns``)."""
        request = self.request
        total = request.completion_tokens
        body = full_body(request, self._response_id, self._created)
        headers = [("x-request-id", request.request_id)]
        self._send(full_response(200, body, self._keep_alive, headers=headers), due_ns, total)
        self._complete()

    def _complete(self) -> None:
        self._end(aborted=False)
        self._conn.finish(self._keep_alive)

    def abort(self) -> None:
        """The client went away (or the server is stopping): drop it, keep its truth."""
        if self.active:
            self._end(aborted=True)

    def _end(self, aborted: bool) -> None:
        self.active = False
        self._conn.on_lost = None
        self._on_end(self, aborted)
        send_ns, request = self._send_ns, self.request
        events, span_ns = self.sent()
        e2e = None if aborted else send_ns[-1] - self._offset_ns - request.arrival_perf_ns
        reason = "abort" if aborted else request.finish_reason
        self._metrics.finished(reason, e2e, sum(self._tokens), events, span_ns)
        if self._truth.enabled:
            self._truth.record(self.truth_record(aborted))

    def truth_record(self, aborted: bool) -> dict[str, object]:
        sends = self._sends
        kernel_sends = 0 if sends is None else sends.settle(self._send_ns, self._offset_ns)
        record = request_truth(self.request, self._clock, self._send_ns, self._tokens, aborted)
        record["kernel_sends"] = kernel_sends
        record["late_us"] = self._late
        return record
