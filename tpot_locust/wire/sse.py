"""Incremental ``text/event-stream`` parser.

Bytes go in as they arrive from the socket, complete events come out. Only ``data``
matters to OpenAI-style streams; ``event``/``id``/``retry`` fields and ``:`` comments are
accepted and ignored. Lines may end in LF, CRLF or CR, and any of them may be split across
reads, so a CR at the end of a read is held back until the next byte shows what it was.
"""

from __future__ import annotations

from tpot_locust.common.errors import OVERSIZED_EVENT, TRUNCATED, StreamError

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024


class SSEParser:
    """Feed bytes, get the ``data`` payload (bytes) of every completed event.

    An event larger than ``max_event_bytes`` raises ``StreamError`` (``oversized_event``).
    When complete events came before it in the same read, ``feed`` returns them and keeps
    the error in ``failure`` (raised by the next ``feed`` or ``close``): the caller checks
    ``failure`` after a read that gave events, so events that did arrive are never lost.
    """

    __slots__ = ("_buffer", "_held_cr", "_max_event_bytes", "failure")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._buffer = b""
        self._held_cr = False
        self._max_event_bytes = max_event_bytes
        self.failure: StreamError | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        if self.failure is not None:
            raise self.failure
        if (  # the common read: exactly one event of one ``data:`` line, nothing held
            chunk[:6] == b"data: "
            and chunk.find(b"\n", 6) == len(chunk) - 2
            and chunk[-1:] == b"\n"
            and not self._buffer
            and not self._held_cr
            and b"\r" not in chunk
            and len(chunk) <= self._max_event_bytes
        ):
            return [chunk[6:-2]]
        if self._held_cr:
            chunk = b"\r" + chunk
            self._held_cr = False
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
            self._held_cr = True
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        # No event boundary was in the held bytes: search only from their last byte on.
        scan = len(self._buffer) - 1 if self._buffer else 0
        buffer = self._buffer + chunk if self._buffer else chunk
        if buffer.find(b"\n\n", scan) < 0:
            self._buffer = buffer
            if len(buffer) > self._max_event_bytes:
                return self._oversized([])
            return []
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
            if len(block) > self._max_event_bytes:  # a whole oversized event in one read
                return self._oversized(events)
            if block[:6] == b"data: " and b"\n" not in block:
                events.append(block[6:])  # the common case: one ``data:`` line
            elif block and (payload := _event_data(block)) is not None:
                events.append(payload)
        if len(self._buffer) > self._max_event_bytes:
            return self._oversized(events)
        return events

    def at_event_start(self, size: int) -> bool:
        """Nothing held from earlier reads and ``size`` bytes fit one event: a read that is
        one whole event may then be taken without ``feed`` (``feed_read``)."""
        return (
            not self._buffer
            and not self._held_cr
            and self.failure is None
            and size <= self._max_event_bytes
        )

    def _oversized(self, events: list[bytes]) -> list[bytes]:
        self._buffer = b""
        self._held_cr = False
        error = StreamError(OVERSIZED_EVENT, f"event larger than {self._max_event_bytes} bytes")
        if not events:
            raise error
        self.failure = error
        return events

    def close(self) -> list[bytes]:
        """End of stream: a held CR ends a line; an unfinished event means truncation."""
        if self.failure is not None:
            raise self.failure
        events = self.feed(b"\n") if self._held_cr else []
        rest = self._buffer.strip(b"\n")
        self._buffer = b""
        if rest and _event_data(rest) is not None:
            raise StreamError(TRUNCATED, "stream ended inside an event")
        return events

    @property
    def pending(self) -> bool:
        return bool(self._buffer.strip(b"\n")) or self._held_cr


def _event_data(block: bytes) -> bytes | None:
    """The joined ``data`` lines of one event block, or None if it has no data field."""
    if block.startswith(b"data: ") and b"\n" not in block:
        return block[6:]  # the common case: one ``data:`` line
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if name != b"data":
            continue
        data.append(value[1:] if value.startswith(b" ") else value)
    if not data:
        return None
    return b"\n".join(data)
