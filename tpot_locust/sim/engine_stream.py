"""Engine mode: one response whose tokens come from the engine's steps.

``emit`` is called by the engine loop at the end of every step that produced a token for
this request; each call is one write. Wire format and truth line: ``response.StreamedResponse``,
plus the engine's fields (steps, preemptions) in the truth line.
"""

from __future__ import annotations

from .engine import Seq
from .http import HttpConnection
from .request import SimRequest
from .response import ResponseSetup, StreamedResponse


class EngineStream(StreamedResponse):
    __slots__ = ("seq", "_sent", "_total", "_steps")

    def __init__(
        self, conn: HttpConnection, request: SimRequest, setup: ResponseSetup, seq: Seq
    ) -> None:
        super().__init__(conn, request, setup)
        self.seq = seq
        seq.sink = self
        self._sent = 0
        self._total = request.completion_tokens
        self._steps: list[int] = []

    def start(self) -> None:
        """Send the response head now (streaming), as vLLM's server does before any token."""
        self._send_head()

    def emit(self, step: int, due_ns: int) -> None:
        """The engine produced this request's next token in ``step``, which was to end at
        ``due_ns`` (perf ns): one write (the hot path)."""
        sent = self._sent = self._sent + 1
        last = sent >= self._total
        if not self.request.stream:
            if last:
                self._steps.append(step)
                self._send_whole(due_ns)
            return
        chunk = self._token_chunk(sent)
        self._steps.append(step)
        self._send(chunk + self._encoder.finish() if last else chunk, due_ns)
        if last:
            self._complete()

    def truth_record(self, aborted: bool) -> dict[str, object]:
        return {
            **super().truth_record(aborted),
            **self.seq.truth_fields(self._clock.offset_ns),
            "steps": self._steps,
        }
