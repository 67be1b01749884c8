"""What every simulated response shares, whoever decides its timing.

``stream.Stream`` (gap mode: its own due times) and ``engine_stream.EngineStream`` (engine
mode: one write per engine step) differ only in *when* they write. The head, the
pre-encoded vLLM chunks, the one-event body of a non-streaming response, the send stamps
and the truth line at the end (complete or aborted) live here, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import vocab
from .chunks import StreamEncoder, full_body
from .clock import Clock
from .http import HttpConnection, full_response, response_head
from .request import SimRequest
from .truth import TruthWriter, request_truth
from .vocab import ESCAPED

N_WORDS = len(ESCAPED)


@dataclass(frozen=True)
class ResponseSetup:
    """What the server tells each response besides the request itself."""

    clock: Clock
    truth: TruthWriter
    keep_alive: bool
    response_id: str
    on_end: Callable[[Any, bool], None]  # (response, aborted): the server forgets it


class Response:
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
        self._send_ns: list[int] = []
        self._tokens: list[int] = []

    def _send_head(self) -> None:
        """Take over the connection; a streaming response sends its head at once."""
        self._conn.on_lost = self.abort  # connection_lost -> abort
        if self._conn.transport is not None:  # bypass the wrapper on the per-token path
            self._write = self._conn.transport.write
        request = self.request
        if request.stream:
            headers = [("content-type", "text/event-stream"), ("cache-control", "no-cache")]
            headers.append(("x-request-id", request.request_id))
            self._write(response_head(200, headers, self._keep_alive, chunked=True))

    def _token_chunk(self, index: int) -> bytes:
        """The SSE chunk of token ``index`` (from 1), with the role chunk before the first."""
        chunk = self._encoder.content(ESCAPED[(index - 1) % N_WORDS], index)
        return self._encoder.role() + chunk if index == 1 else chunk

    def _send(self, data: bytes, tokens: int = 1, events: int = 1) -> None:
        """Write, and stamp the truth: ``events`` token events of ``tokens`` tokens each."""
        stamp = time.perf_counter_ns() + self._offset_ns
        self._write(data)
        if events == 1:
            self._send_ns.append(stamp)
            self._tokens.append(tokens)
        else:
            self._send_ns.extend([stamp] * events)
            self._tokens.extend([tokens] * events)

    def _send_whole(self) -> None:
        """Non-streaming: all tokens reach the client in one body, when the last is due."""
        request = self.request
        total = request.completion_tokens
        body = full_body(request, self._response_id, self._created, vocab.text(total))
        headers = [("x-request-id", request.request_id)]
        self._send(full_response(200, body, self._keep_alive, headers=headers), tokens=total)
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
        if self._truth.enabled:
            self._truth.record(self.truth_record(aborted))

    def truth_record(self, aborted: bool) -> dict[str, Any]:
        return request_truth(self.request, self._clock, self._send_ns, self._tokens, aborted)
