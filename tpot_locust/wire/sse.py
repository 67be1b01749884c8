"""Incremental ``text/event-stream`` parser, read by read, as the WHATWG spec parses.

Bytes go in as they arrive from the socket, complete events come out. Lines end in LF,
CRLF or CR (each one line end); a CR that ends a read is acted on at once, since waiting
for the next read to see whether an LF follows would stamp the event late, and an LF
that then starts the next read is dropped. One UTF-8 BOM at the stream's start is
skipped, even split across reads. ``data`` lines make the payload; ``event`` names it
(an ``SSEEvent``, see there); ``id``/``retry`` fields and ``:`` comments are ignored;
one exception to the spec: an ``error:`` field is read as ``event: error`` data (llama.cpp
writes its failures so, and the server's message would be lost). As
the spec says, an event with no ``data`` line is not dispatched (``event: ping`` alone
gives nothing), and an event left unfinished at the end of the stream (no blank line
after it) is dropped: whether the stream was whole is for the decoder to tell from what
arrived (a finish_reason, ``[DONE]``).
"""

from __future__ import annotations

from tpot_locust.common.errors import OVERSIZED_EVENT, StreamError

DEFAULT_MAX_EVENT_BYTES = 4 * 1024 * 1024
MAX_EVENT_BYTES_LIMIT = 256 * 1024 * 1024  # the largest event limit a setting may ask for
MAX_EVENT_NAME_CHARS = 128

BOM = b"\xef\xbb\xbf"
# What the start of the next read may need: nothing, an LF to drop (the read before ended
# in CR), or the stream's first bytes (a BOM may be arriving, its first bytes held).
_PLAIN, _DROP_LF, _START = 0, 1, 2


class SSEEvent(bytes):
    """The data of an event named by an ``event:`` field other than ``message``: the
    payload bytes, with the name in ``name`` (at most 128 characters). A ``bytes``
    subclass so that unnamed events (nearly all) stay plain ``bytes`` and cost nothing
    more, and a decoder finds named ones by ``type(payload) is not bytes``."""

    name: str

    def __new__(cls, data: bytes, name: str) -> SSEEvent:
        event = super().__new__(cls, data)
        event.name = name
        return event

    def __reduce__(self) -> tuple[type[SSEEvent], tuple[bytes, str]]:
        return (SSEEvent, (bytes(self), self.name))

    def __repr__(self) -> str:
        return f"SSEEvent({bytes(self)!r}, name={self.name!r})"


class SSEParser:
    """Feed bytes, get the ``data`` payload (bytes, or ``SSEEvent`` when named) of every
    completed event.

    An event larger than ``max_event_bytes`` raises ``StreamError`` (``oversized_event``).
    When complete events came before it in the same read, ``feed`` returns them and keeps
    the error in ``failure`` (raised by the next ``feed`` or ``close``): the caller checks
    ``failure`` after a read that gave events, so events that did arrive are never lost.
    """

    __slots__ = ("_buffer", "_lead", "failure", "max_event_bytes")

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if not 1 <= max_event_bytes <= MAX_EVENT_BYTES_LIMIT:
            raise ValueError(f"max_event_bytes must be 1 .. {MAX_EVENT_BYTES_LIMIT}")
        self._buffer = b""  # the unfinished event, line ends made LF
        self._lead = _START
        self.max_event_bytes = max_event_bytes
        self.failure: StreamError | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        if self.failure is not None:
            raise self.failure
        if (  # the common read: exactly one event of one ``data:`` line, nothing held
            chunk[:6] == b"data: "
            and chunk.find(b"\n", 6) == len(chunk) - 2
            and chunk[-1:] == b"\n"
            and not self._buffer
            and not self._lead
            and b"\r" not in chunk
            and len(chunk) <= self.max_event_bytes
        ):
            return [chunk[6:-2]]
        if self._lead:
            chunk = self._lead_in(chunk)
        if not chunk:
            return []
        if chunk[-1:] == b"\r":  # a line end now; an LF starting the next read is its CRLF's
            self._lead = _DROP_LF
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        # No event boundary was in the held bytes: search only from their last byte on.
        scan = len(self._buffer) - 1 if self._buffer else 0
        buffer = self._buffer + chunk if self._buffer else chunk
        if buffer.find(b"\n\n", scan) < 0:
            self._buffer = buffer
            if len(buffer) > self.max_event_bytes:
                return self._oversized([])
            return []
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
            if len(block) > self.max_event_bytes:  # a whole oversized event in one read
                return self._oversized(events)
            if block[:6] == b"data: " and b"\n" not in block:
                events.append(block[6:])  # the common case: one ``data:`` line
            elif block and (payload := _event_data(block)) is not None:
                events.append(payload)
        if len(self._buffer) > self.max_event_bytes:
            return self._oversized(events)
        return events

    def _lead_in(self, chunk: bytes) -> bytes:
        """``chunk`` without what the stream so far says is no content: the LF of a CRLF
        split across reads, or the stream's BOM (whose first bytes may be held)."""
        if self._lead == _DROP_LF:
            if not chunk:
                return chunk  # the LF may still come
            self._lead = _PLAIN
            return chunk[1:] if chunk[:1] == b"\n" else chunk
        chunk = self._buffer + chunk
        self._buffer = b""
        if chunk[:3] == BOM:
            self._lead = _PLAIN
            return chunk[3:]
        if BOM.startswith(chunk):  # nothing, or the first bytes of a BOM: wait for more
            self._buffer = chunk
            return b""
        self._lead = _PLAIN
        return chunk

    def at_event_start(self, size: int) -> bool:
        """Nothing held from earlier reads, nothing the next read's first bytes may have to
        give up (an LF, a BOM), and ``size`` bytes fit one event: a read that is one whole
        event may then be taken without ``feed`` (``feed_read``)."""
        return (
            not self._buffer
            and not self._lead
            and self.failure is None
            and size <= self.max_event_bytes
        )

    def _oversized(self, events: list[bytes]) -> list[bytes]:
        self._buffer = b""
        self._lead = _PLAIN
        error = StreamError(OVERSIZED_EVENT, f"event larger than {self.max_event_bytes} bytes")
        if not events:
            raise error
        self.failure = error
        return events

    def close(self) -> list[bytes]:
        """End of stream. Line ends were acted on as they came, so no event is left to
        complete: an unfinished one is dropped (the spec's rule), never an error here."""
        if self.failure is not None:
            raise self.failure
        self._buffer = b""
        self._lead = _PLAIN
        return []

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished event are held."""
        return bool(self._buffer.strip(b"\n"))


def _event_data(block: bytes) -> bytes | None:
    """The joined ``data`` lines of one event block (an ``SSEEvent`` when an ``event``
    field names it other than ``message``), or None if it has no data field."""
    if block.startswith(b"data: ") and b"\n" not in block:
        return block[6:]  # the common case: one ``data:`` line
    data: list[bytes] = []
    name = b""
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value  # the last one counts; an empty one means ``message``
        elif field == b"error" and not data:
            # llama.cpp's server writes its failures as an ``error:`` field (its
            # server_sent_event(sink, "error", ...)): the standard ignores the field, and
            # the server's message would be lost; read as ``event: error`` data instead
            data.append(value)
            name = b"error"
    if not data:
        return None
    payload = b"\n".join(data)
    if name and name != b"message":
        # 512 bytes hold 128 characters however they are encoded
        text = name[: 4 * MAX_EVENT_NAME_CHARS].decode("utf-8", "replace")
        return SSEEvent(payload, text[:MAX_EVENT_NAME_CHARS])
    return payload
