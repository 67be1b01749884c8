"""One response served by the engine: each step that produced its token makes one write.

Same wire format and truth line as ``stream.Stream`` (vLLM chunks, pre-encoded), but the
timing is the engine's: ``emit`` is called by the engine loop at the end of every step that
produced a token for this request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import vocab
from .chunks import StreamEncoder, full_body
from .clock import Clock
from .engine import Seq
from .http import HttpConnection, full_response, response_head
from .request import SimRequest
from .truth import TruthWriter, request_truth
from .vocab import ESCAPED

N_WORDS = len(ESCAPED)


class EngineStream:
    __slots__ = (
        "active",
        "request",
        "seq",
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
        "_sent",
        "_total",
        "_stream",
        "_send_ns",
        "_tokens",
        "_steps",
    )

    def __init__(
        self,
        conn: HttpConnection,
        request: SimRequest,
        seq: Seq,
        *,
        clock: Clock,
        truth: TruthWriter,
        keep_alive: bool,
        response_id: str,
        on_end: Callable[[EngineStream, bool], None],
    ) -> None:
        self.active = True
        self.request = request
        self.seq = seq
        seq.sink = self
        self._conn = conn
        self._write = conn.write
        self._clock = clock
        self._offset_ns = clock.offset_ns
        self._truth = truth
        self._keep_alive = keep_alive
        self._on_end = on_end  # (stream, aborted): the server forgets it, the engine drops it
        self._response_id = response_id
        self._created = int(time.time())
        self._encoder = StreamEncoder(request, response_id, self._created)
        self._sent = 0
        self._total = request.completion_tokens
        self._stream = request.stream
        self._send_ns: list[int] = []
        self._tokens: list[int] = []
        self._steps: list[int] = []

    def start(self) -> None:
        """Send the response head now (streaming), as vLLM's server does before any token."""
        self._conn.on_lost = self.abort
        if self._conn.transport is not None:
            self._write = self._conn.transport.write
        if self._stream:
            request = self.request
            headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
            headers.append(("x-request-id", request.request_id))
            self._write(response_head(200, headers, self._keep_alive, chunked=True))

    def emit(self, step: int) -> None:
        """The engine produced this request's next token: one write (the hot path)."""
        sent = self._sent + 1
        self._sent = sent
        if not self._stream:
            if sent >= self._total:
                self._send_whole(step)
            return
        encoder = self._encoder
        token = encoder.content(ESCAPED[(sent - 1) % N_WORDS], sent)
        if sent == 1:
            token = encoder.role() + token
        if sent >= self._total:
            token += encoder.finish()
        stamp = time.perf_counter_ns() + self._offset_ns
        self._write(token)
        self._send_ns.append(stamp)
        self._tokens.append(1)
        self._steps.append(step)
        if sent >= self._total:
            self._complete()

    def _send_whole(self, step: int) -> None:
        request = self.request
        body = full_body(request, self._response_id, self._created, vocab.text(self._total))
        headers = [("x-request-id", request.request_id)]
        data = full_response(200, body, self._keep_alive, headers=headers)
        stamp = time.perf_counter_ns() + self._offset_ns
        self._write(data)
        self._send_ns.append(stamp)
        self._tokens.append(self._total)
        self._steps.append(step)
        self._complete()

    def _complete(self) -> None:
        self._end(aborted=False)
        self._conn.finish(self._keep_alive)

    def abort(self) -> None:
        if self.active:
            self._end(aborted=True)

    def _end(self, aborted: bool) -> None:
        self.active = False
        self._conn.on_lost = None
        self._on_end(self, aborted)
        if self._truth.enabled:
            self._truth.record(self.truth_record(aborted))

    def truth_record(self, aborted: bool) -> dict[str, Any]:
        return {
            **request_truth(self.request, self._clock, self._send_ns, self._tokens, aborted),
            **self.seq.truth_fields(self._clock.offset_ns),
            "steps": self._steps,
        }
