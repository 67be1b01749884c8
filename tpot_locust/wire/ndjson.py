"""Incremental newline-delimited JSON (``application/x-ndjson``) parser, read by read.

The streams of some APIs (Ollama's, TGI's ``/generate_stream`` without SSE) are one JSON
document a line. Same interface as ``sse.SSEParser``, so the reader drives either: each
non-blank line (LF or CRLF ended) is one event's payload, a UTF-8 BOM at the stream's
start is skipped, and unlike SSE a last line that the end of the stream ends (no LF
before the close) is an event: NDJSON has no blank line to wait for, a line is whole.
"""

from __future__ import annotations

from tpot_locust.common.errors import OVERSIZED_EVENT, StreamError
from tpot_locust.wire.sse import BOM, DEFAULT_MAX_EVENT_BYTES, MAX_EVENT_BYTES_LIMIT

_BLANK_START = b" \t\r\x0b\x0c"  # a line starting with one of these may be blank


class NDJSONParser:
    """Feed bytes, get the payload (bytes, without its line end) of every completed line.

    A line longer than ``max_event_bytes`` raises ``StreamError`` (``oversized_event``);
    lines that came before it in the same read are returned and the error is kept in
    ``failure`` (raised by the next ``feed`` or ``close``), as ``SSEParser`` does.
    """

    __slots__ = ("_buffer", "_start", "failure", "max_event_bytes")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if not 1 <= max_event_bytes <= MAX_EVENT_BYTES_LIMIT:
            raise ValueError(f"max_event_bytes must be 1 .. {MAX_EVENT_BYTES_LIMIT}")
        self._buffer = b""  # the unfinished line (at the start: a BOM's first bytes)
        self._start = True  # a BOM may still be arriving
        self.max_event_bytes = max_event_bytes
        self.failure: StreamError | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        if self.failure is not None:
            raise self.failure
        if (  # the common read: exactly one line holding one JSON object, nothing held
            chunk[:1] == b"{"
            and chunk.find(b"\n") == len(chunk) - 1
            and not self._buffer
            and not self._start
            and len(chunk) <= self.max_event_bytes
        ):
            return [chunk[:-2] if chunk[-2:-1] == b"\r" else chunk[:-1]]
        if self._start:
            chunk = self._buffer + chunk
            self._buffer = b""
            if chunk[:3] == BOM:
                chunk = chunk[3:]
            elif BOM.startswith(chunk):  # nothing, or a BOM's first bytes: wait for more
                self._buffer = chunk
                return []
            self._start = False
        if chunk.find(b"\n") < 0:  # the held bytes hold no LF: only the new ones may
            self._buffer = self._buffer + chunk if self._buffer else chunk
            if len(self._buffer) > self.max_event_bytes + 1:  # + 1: a CR before the LF
                return self._oversized([])
            return []
        lines = (self._buffer + chunk if self._buffer else chunk).split(b"\n")
        self._buffer = lines.pop()
        events: list[bytes] = []
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if len(line) > self.max_event_bytes:
                return self._oversized(events)
            if line and (line[:1] not in _BLANK_START or line.strip()):
                events.append(line)
        if len(self._buffer) > self.max_event_bytes + 1:
            return self._oversized(events)
        return events

    def at_event_start(self, size: int) -> bool:
        """Nothing held from earlier reads, no BOM still possible, and ``size`` bytes fit
        one event: the meaning ``SSEParser.at_event_start`` has."""
        return (
            not self._buffer
            and not self._start
            and self.failure is None
            and size <= self.max_event_bytes
        )

    def _oversized(self, events: list[bytes]) -> list[bytes]:
        self._buffer = b""
        error = StreamError(OVERSIZED_EVENT, f"line larger than {self.max_event_bytes} bytes")
        if not events:
            raise error
        self.failure = error
        return events

    def close(self) -> list[bytes]:
        """End of stream: it ends the last line too, which is then an event (if not
        blank)."""
        if self.failure is not None:
            raise self.failure
        line, self._buffer, self._start = self._buffer, b"", False
        if line[-1:] == b"\r":
            line = line[:-1]
        return [line] if line.strip() else []

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished line are held."""
        return bool(self._buffer.strip())
