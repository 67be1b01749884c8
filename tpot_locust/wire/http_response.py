"""A response's body, read and unframed read by read: the half of the HTTP client
(``http_client``) that takes over once the head has arrived.

Why apart: the connection sends and reads heads; how a body ends (chunked framing, a
Content-Length, a close), how it is decompressed and how two read loops share one step
(``absorb``: this greenlet's ``read_into``, the event loop's ``loop_reads.read_body``) is
a room of its own. A server that gzips or deflates although asked not to is decoded read
by read, in bounded pieces (``INFLATE_PIECE_BYTES``), so a decompression bomb is cut off by
the event size limit instead of filling memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tpot_locust.common.errors import BAD_HTTP, StreamError
from tpot_locust.wire.chunked import ChunkedDecoder
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.inflate import (
    DECODED_ENCODINGS,
    INFLATE_PIECE_BYTES,
    MAX_INFLATED_PER_READ,
    Inflater,
)
from tpot_locust.wire.stamped_socket import Batch, Run, Split

Consume = Callable[[int, bytes], None]  # (arrival on the stamp clock, body payload)
# Takes pieces already read as far as they are one run of events; the pieces left, or None
TakeRun = Callable[[list[tuple[bytes, int]]], "list[tuple[bytes, int]] | None"]
MAX_LENGTH_DIGITS = 18  # a Content-Length below 10^18 bytes still fits int64
Pieces = list[tuple[bytes, int]]  # what one read brought: (bytes, arrival on the stamp clock)


class BodyConnection(Protocol):
    """What reading a body takes of its connection (``http_client.HTTPConnection``): this
    greenlet's reads, the event loop's (``loop_reads``), and closing it."""

    def recv_stamped(self, deadline: Deadline) -> tuple[bytes, int]: ...
    def take_pending(self) -> Pieces: ...
    def close(self) -> None: ...
    def loop_fileno(self) -> int | None: ...
    def read_ready(self, batch: Batch | None = None) -> Pieces | None: ...
    def read_ready_run(self, split: Split, batch: Batch | None = None) -> Run | Pieces | None: ...
    def ack_on_arrival(self, on: bool) -> None: ...
    def data_waiting(self) -> bool: ...
    @property
    def stamps_each_segment(self) -> bool: ...
    @property
    def read_was_full(self) -> bool: ...
    @property
    def segment_key(self) -> int | None: ...


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]
    connection: BodyConnection
    first_body: bytes
    head_stamp_ns: int
    deadline: Deadline  # the request's one deadline: started at the send, moved by the reader
    complete: bool = False
    reset: bool = False
    _decoder: ChunkedDecoder | None = field(init=False, default=None)
    _inflater: Inflater | None = field(init=False, default=None)  # gzip, deflate
    _remaining: int | None = field(init=False, default=None)  # identity body bytes left
    # raised when the body is read, so that an HTTP error status still shows as such
    _length_error: StreamError | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding in DECODED_ENCODINGS:
            self._inflater = Inflater(encoding)
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._decoder = ChunkedDecoder()
            return
        try:
            self._remaining = self._content_length()
        except StreamError as error:
            self._length_error = error

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def inflating(self) -> bool:
        """The body's Content-Encoding (gzip, x-gzip, deflate) is decoded here."""
        return self._inflater is not None

    def read_into(self, consume: Consume) -> None:
        """Hand ``consume(arrival_ns, payload)`` every payload of the body, read by this
        greenlet; ``loop_reads.read_body`` is the same loop driven by the event loop.

        Ends when the body is complete, or when the peer closes or resets early; then
        ``complete`` is False and ``reset`` tells which. Raises ``ReadTimeout`` when no byte
        came before ``deadline.at_ns`` (which ``consume`` may move), ``StreamError`` for bad
        framing or a socket error other than a reset, and whatever ``consume`` raises.
        """
        if self.begin(consume):
            return
        while True:
            try:
                data, stamp = self.connection.recv_stamped(self.deadline)
            except ConnectionResetError:
                self.peer_closed(reset=True)
                return
            if self.absorb(data, stamp, consume):
                return

    def begin(self, consume: Consume, take_run: TakeRun | None = None) -> bool:
        """Hand on the body bytes that came with the head; whether the body has ended.
        Once ``take_run`` takes them (``PlainRuns.take_pieces``), the pieces go to it as
        far as they are a run."""
        payload = self.take(self.first_body)
        if payload:
            consume(self.head_stamp_ns, payload)
        if self._inflater is not None:
            self._inflate_rest(self.head_stamp_ns, consume)
        if self.settle():
            return True
        # the rest of the head's read, each segment with its own stamp
        pieces = self.connection.take_pending()
        at = 0
        while at < len(pieces):
            if take_run is not None and (rest := take_run(pieces[at:])) is not None:
                return any(self.absorb(data, stamp, consume) for data, stamp in rest)
            data, stamp = pieces[at]
            if self.absorb(data, stamp, consume):
                return True
            at += 1
        return False

    def absorb(self, data: bytes, stamp: int, consume: Consume) -> bool:
        """One socket read (b"": the peer closed) handed on; whether the body has ended.
        The step both read loops share."""
        if not data:
            self.peer_closed(reset=False)
            return True
        payload = self.take(data)
        if payload:
            consume(stamp, payload)
        if self._inflater is not None:
            self._inflate_rest(stamp, consume)
        return self.settle()

    def take(self, data: bytes) -> bytes:
        """The body payload in bytes just read (framing removed; of a compressed body, the
        first piece it decodes to: ``absorb`` hands on the rest). Hand it on, then call
        ``settle``: a framing error after good payload is raised there, not lost."""
        if self._decoder is not None:
            data = self._decoder.feed(data) if data else b""
        else:
            if self._length_error is not None:
                raise self._length_error
            if self._remaining is not None:
                data = data[: self._remaining]
                self._remaining -= len(data)
        inflater = self._inflater
        return data if inflater is None or not data else inflater.feed(data)

    def _inflate_rest(self, stamp: int, consume: Consume) -> None:
        """Hand on, piece by piece, what the last read decompresses to beyond its first
        piece: a consumer that refuses (an oversized event) stops the decompression, and so
        does ``MAX_INFLATED_PER_READ``: 200 MiB of line ends from 200 KB on the wire held
        the event loop 11 s in one read, never an event too large."""
        inflater = self._inflater
        inflated = INFLATE_PIECE_BYTES
        while inflater is not None and inflater.more:
            if inflated >= MAX_INFLATED_PER_READ:
                raise StreamError(
                    BAD_HTTP,
                    f"compressed body: one read inflates to over {MAX_INFLATED_PER_READ}"
                    " bytes (a decompression bomb, not a stream)",
                )
            piece = inflater.next_piece()
            inflated += len(piece)
            if piece:
                consume(stamp, piece)

    @property
    def end_is_marked(self) -> bool:
        """The body's end shows on the wire: a last chunk, or the peer's close (a body with
        a Content-Length ends at a byte count that only a read can tell)."""
        return self._decoder is not None or (self._remaining is None and self._length_error is None)

    @property
    def between_chunks(self) -> bool:
        """A chunked body (not compressed) whose framing holds nothing back: the next
        bytes start a chunk, so whole chunks may be taken without ``take``."""
        decoder = self._decoder
        return decoder is not None and decoder.at_boundary and self._inflater is None

    def settle(self) -> bool:
        """Whether the body is complete (the connection is then ready for reuse or closed);
        raises the framing error ``take`` kept."""
        decoder = self._decoder
        if decoder is not None:
            if decoder.failure is not None:
                raise decoder.failure
            ended = decoder.done
        else:
            ended = self._remaining == 0
        if ended:
            if self._inflater is not None:
                self._inflater.check_ended()
            self._finish(keep_alive=True)
        return ended

    def peer_closed(self, reset: bool) -> None:
        """The peer closed (``reset``: reset) before ``settle`` saw the body complete."""
        self.reset = reset
        # A close ends a body only when it has neither length nor chunked framing.
        framed = self._decoder is not None or self._remaining is not None
        inflated = self._inflater is None or self._inflater.ended
        self._finish(keep_alive=False, complete=not reset and not framed and inflated)

    def read(self, limit: int | None = None) -> bytes:
        """The whole body, every read within the deadline's idle limit of the previous one;
        with ``limit``, at most that many bytes (then the connection is closed, since the
        rest of the body was not read)."""
        pieces: list[bytes] = []
        size = 0

        def consume(stamp: int, piece: bytes) -> None:
            nonlocal size
            self.deadline.arrived(stamp)
            pieces.append(piece)
            size += len(piece)
            if limit is not None and size >= limit:
                raise _Enough()

        try:
            self.read_into(consume)
        except _Enough:
            if not self.complete:
                self.connection.close()
        body = b"".join(pieces)
        return body if limit is None else body[:limit]

    def _content_length(self) -> int | None:
        value = self.headers.get("content-length")
        if value is None:
            return None
        # ASCII digits only: str.isdigit() takes "²" and other Unicode digits, which int()
        # then refuses; and no more digits than a length can have (int() refuses 4,300+)
        if not (value.isascii() and value.isdigit()) or len(value) > MAX_LENGTH_DIGITS:
            raise StreamError(BAD_HTTP, f"bad Content-Length {value[:40]!r}")
        return int(value)

    def _finish(self, keep_alive: bool, complete: bool = True) -> None:
        self.complete = complete
        wants_close = self.headers.get("connection", "").lower() == "close"
        if not keep_alive or wants_close or not complete:
            self.connection.close()


class _Enough(Exception):
    """``Response.read`` has as many bytes as it was asked for."""
