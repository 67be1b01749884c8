"""Gap mode: one response whose token events are due on its own timing model's grid.

Due times are kept on the scheduled grid (previous due + gap), never on the actual wake time,
so a late wake sends everything due at once and the next event is not pushed back.
"""

from __future__ import annotations

from .http import HttpConnection
from .request import SimRequest
from .response import ResponseSetup, StreamedResponse
from .timing import TimingModel


def s_to_ns(seconds: float) -> int:
    """Delays come from the timing model in seconds; the scheduler works in integer ns."""
    return round(seconds * 1e9)


class Stream(StreamedResponse):
    """Drives one request (streaming or not) from arrival to its last write."""

    __slots__ = ("_timing", "_next_gap", "_due", "_sent")

    def __init__(
        self, conn: HttpConnection, request: SimRequest, setup: ResponseSetup, timing: TimingModel
    ) -> None:
        super().__init__(conn, request, setup)
        self._timing = timing
        self._next_gap = timing.next_gap_s
        self._due = 0
        self._sent = 0

    def start(self) -> int:
        """Send the response head (streaming, as uvicorn does) and return the first due time."""
        self._send_head()
        request, timing = self.request, self._timing
        self._due = request.arrival_perf_ns + s_to_ns(timing.first_token_delay_s(request))
        if not request.stream:  # nothing is sent before the last token: one wake suffices
            for index in range(1, request.completion_tokens):
                self._due += s_to_ns(timing.next_gap_s(request, index))
            self._sent = request.completion_tokens - 1
        return self._due

    def on_due(self, now_ns: int) -> int | None:
        """Send every token event due by ``now_ns`` in one write (the hot path)."""
        request = self.request
        first_due = self._due
        if not request.stream:
            self._send_whole(first_due)
            return None
        next_gap = self._next_gap
        sent, total, due = self._sent + 1, request.completion_tokens, first_due
        chunk = self._token_chunk(sent)
        if sent < total:  # nearly always one event, neither the last nor late by a gap
            due += round(next_gap(request, sent) * 1e9)
            if due > now_ns:
                self._sent, self._due = sent, due
                self._send(chunk, first_due)
                return due
        parts = [chunk]
        later_dues = []  # the due times of the events after the first in this write
        while sent < total and due <= now_ns:  # a wake late by a gap or more: all due
            sent += 1
            later_dues.append(due)
            parts.append(self._token_chunk(sent))
            if sent < total:
                due += round(next_gap(request, sent) * 1e9)
        if sent >= total:
            parts.append(self._encoder.finish())
        first, events = self._sent, sent - self._sent
        self._sent, self._due = sent, due
        left = self._send(b"".join(parts), first_due, events=events)
        for offset, later_due in enumerate(later_dues, start=1):
            self._late_too(first + offset, later_due, left)
        if sent < total:
            return due
        self._complete()
        return None
