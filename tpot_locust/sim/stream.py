"""One response in flight: turns due token events into writes and a truth record.

Due times are kept on the scheduled grid (previous due + gap), never on the actual wake time,
so a late wake sends everything due at once and the next event is not pushed back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import vocab
from .chunks import StreamEncoder, full_body
from .clock import Clock, s_to_ns
from .http import HttpConnection, full_response, response_head
from .request import SimRequest
from .timing import TimingModel
from .truth import TruthWriter, request_truth
from .vocab import ESCAPED

N_WORDS = len(ESCAPED)


class Stream:
    """Drives one request (streaming or not) from arrival to its last write."""

    __slots__ = (
        "active",
        "request",
        "_conn",
        "_write",
        "_encoder",
        "_timing",
        "_clock",
        "_offset_ns",
        "_next_gap",
        "_truth",
        "_keep_alive",
        "_on_end",
        "_response_id",
        "_created",
        "_due",
        "_sent",
        "_send_ns",
        "_tokens",
    )

    def __init__(
        self,
        conn: HttpConnection,
        request: SimRequest,
        *,
        timing: TimingModel,
        clock: Clock,
        truth: TruthWriter,
        keep_alive: bool,
        response_id: str,
        on_end: Callable[[Stream], None],
    ) -> None:
        self.active = True
        self.request = request
        self._conn = conn
        self._write = conn.write
        self._timing = timing
        self._clock = clock
        self._offset_ns = clock.offset_ns
        self._next_gap = timing.next_gap_s
        self._truth = truth
        self._keep_alive = keep_alive
        self._on_end = on_end
        self._response_id = response_id
        self._created = int(time.time())
        self._encoder = StreamEncoder(request, response_id, self._created)
        self._due = 0
        self._sent = 0
        self._send_ns: list[int] = []
        self._tokens: list[int] = []

    def start(self) -> int:
        """Send the response head (streaming, as uvicorn does) and return the first due time."""
        request = self.request
        self._conn.on_lost = self.abort  # connection_lost -> abort -> inactive in the heap
        if self._conn.transport is not None:  # bypass the wrapper on the per-token path
            self._write = self._conn.transport.write
        if request.stream:
            headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
            headers.append(("x-request-id", request.request_id))
            self._write(response_head(200, headers, self._keep_alive, chunked=True))
        timing = self._timing
        self._due = request.arrival_perf_ns + s_to_ns(timing.first_token_delay_s(request))
        if not request.stream:  # nothing is sent before the last token: one wake suffices
            for index in range(1, request.completion_tokens):
                self._due += s_to_ns(timing.next_gap_s(request, index))
            self._sent = request.completion_tokens - 1
        return self._due

    def on_due(self, now_ns: int) -> int | None:
        """Send every token event due by ``now_ns`` in one write (the hot path)."""
        request = self.request
        if not request.stream:
            return self._send_whole()
        encoder, next_gap = self._encoder, self._next_gap
        sent, total, due = self._sent, request.completion_tokens, self._due
        parts = [encoder.role()] if sent == 0 else []
        events = 0
        while True:  # normally one pass: a wake is late by < 1 ms, gaps are longer
            parts.append(encoder.content(ESCAPED[sent % N_WORDS], sent + 1))
            sent += 1
            events += 1
            if sent >= total:
                parts.append(encoder.finish())
                break
            due += round(next_gap(request, sent) * 1e9)
            if due > now_ns:
                break
        self._sent, self._due = sent, due
        data = b"".join(parts)
        stamp = time.perf_counter_ns() + self._offset_ns
        self._write(data)
        if events == 1:
            self._send_ns.append(stamp)
            self._tokens.append(1)
        else:
            self._send_ns.extend([stamp] * events)
            self._tokens.extend([1] * events)
        if sent < total:
            return due
        self._complete()
        return None

    def _send_whole(self) -> None:
        """Non-streaming: all tokens reach the client in one event, when the last is due."""
        request = self.request
        total = request.completion_tokens
        body = full_body(request, self._response_id, self._created, vocab.text(total))
        headers = [("x-request-id", request.request_id)]
        data = full_response(200, body, self._keep_alive, headers=headers)
        stamp = time.perf_counter_ns() + self._offset_ns
        self._write(data)
        self._send_ns.append(stamp)
        self._tokens.append(total)
        self._sent = total
        self._complete()

    def _complete(self) -> None:
        self._end(aborted=False)
        self._conn.finish(self._keep_alive)

    def abort(self) -> None:
        """The client went away (or the server is stopping): drop the stream, keep its truth."""
        if self.active:
            self._end(aborted=True)

    def _end(self, aborted: bool) -> None:
        self.active = False
        self._conn.on_lost = None
        self._on_end(self)
        if self._truth.enabled:
            self._truth.record(self.truth_record(aborted))

    def truth_record(self, aborted: bool) -> dict[str, Any]:
        return request_truth(self.request, self._clock, self._send_ns, self._tokens, aborted)
