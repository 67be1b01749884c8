"""Incremental ``Transfer-Encoding: chunked`` decoding, read by read.

Streaming servers send one SSE event per chunk, so most reads are one whole chunk: that
case is cut with a few slices; anything else (partial chunks, several at once, extensions,
the last chunk and its trailers) goes through a small state machine. A chunk size is
1 to 16 hex digits (RFC 9112 ``1*HEXDIG``; 16 hold any 64-bit size), optionally followed
by whitespace and a ``;`` extension: what Python's ``int(s, 16)`` would also take (``0x5``,
``1_0``, ``+5``, `` 5``, a 100-digit size that waits for an idle timeout) is bad framing.
"""

from __future__ import annotations

import re

from tpot_locust.common.errors import BAD_HTTP, StreamError

MAX_SIZE_DIGITS = 16
HEX_DIGITS = b"0123456789abcdefABCDEF"  # deleted by translate: hex digits only if b"" is left
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?").fullmatch
# what may begin a size line whose CRLF has not come yet (its CR may have)
_SIZE_START = re.compile(rb"(?:[0-9A-Fa-f]{1,16}[ \t]*(?:;[^\r\n]*)?\r?)?\Z").match


class ChunkedDecoder:
    """Incremental ``Transfer-Encoding: chunked`` decoder: feed raw bytes, get payload.

    Bad framing raises ``StreamError`` (``bad_http``). When the read that brings it also
    brought good payload before it, ``feed`` returns that payload and keeps the error in
    ``failure`` (raised by the next ``feed``), so data that did arrive is never lost.
    """

    __slots__ = ("_buffer", "_remaining", "_state", "failure")

    _SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0
        self._state = self._SIZE
        self.failure: StreamError | None = None

    @property
    def done(self) -> bool:
        return self._state == self._DONE

    @property
    def at_boundary(self) -> bool:
        """The next byte starts a chunk's size line: nothing held, nothing failed."""
        return self._state == self._SIZE and not self._buffer and self.failure is None

    def feed(self, data: bytes) -> bytes:
        if self.failure is not None:
            raise self.failure
        if self._state == self._SIZE and not self._buffer:
            # the common read: exactly one whole chunk (servers send one event per chunk)
            line_end = data.find(b"\r\n", 0, MAX_SIZE_DIGITS + 2)
            if line_end > 0 and not (digits := data[:line_end]).translate(None, HEX_DIGITS):
                size = int(digits, 16)
                if size > 0 and len(data) == line_end + size + 4 and data[-2:] == b"\r\n":
                    return data[line_end + 2 : -2]
        payload: list[bytes] = []
        try:
            self._feed(data, payload)
        except StreamError as error:
            self._buffer = b""
            if not payload:
                raise
            self.failure = error
        return b"".join(payload)

    def _feed(self, data: bytes, payload: list[bytes]) -> None:
        buffer = self._buffer + data if self._buffer else data
        position = 0
        if self._state == self._SIZE:
            position = self._whole_chunks(buffer, payload)
        while self._state != self._DONE:
            if self._state == self._DATA:
                piece = buffer[position : position + self._remaining]
                if piece:
                    payload.append(piece)
                position += len(piece)
                self._remaining -= len(piece)
                if self._remaining:
                    break
                self._state = self._DATA_END
            line_end = buffer.find(b"\r\n", position)
            if line_end < 0:
                if len(buffer) - position > 1024:
                    raise StreamError(BAD_HTTP, "chunk framing line too long")
                if self._state == self._SIZE and not _SIZE_START(buffer, position):
                    _chunk_size(buffer[position:])  # bad already: raises now, not at its CRLF
                break
            line = buffer[position:line_end]
            position = line_end + 2
            if self._state == self._DATA_END:
                if line:
                    raise StreamError(BAD_HTTP, "chunk data longer than its declared size")
                self._state = self._SIZE
            elif self._state == self._SIZE:
                size = _chunk_size(line)
                self._state = self._TRAILER if size == 0 else self._DATA
                self._remaining = size
            elif not line:  # the empty line after the last chunk's trailers
                self._state = self._DONE
        self._buffer = buffer[position:]

    @staticmethod
    def _whole_chunks(buffer: bytes, payload: list[bytes]) -> int:
        """Fast path for complete ``<hex>\\r\\n<data>\\r\\n`` chunks (servers send one SSE
        event per chunk); returns where it stopped. Anything else (a partial or last chunk,
        an extension, bad framing) is left to the state machine."""
        position, length = 0, len(buffer)
        while True:
            line_end = buffer.find(b"\r\n", position, position + MAX_SIZE_DIGITS + 2)
            if line_end <= position:
                return position
            digits = buffer[position:line_end]
            if digits.translate(None, HEX_DIGITS):
                return position
            size = int(digits, 16)
            data_end = line_end + 2 + size
            if size <= 0 or data_end + 2 > length or buffer[data_end : data_end + 2] != b"\r\n":
                return position
            payload.append(buffer[line_end + 2 : data_end])
            position = data_end + 2


def _chunk_size(line: bytes) -> int:
    """The size a chunk-size line (without its CRLF) declares; bad framing raises."""
    match = _SIZE_LINE(line)
    if match is None:
        raise StreamError(BAD_HTTP, f"bad chunk size line {line[:40]!r}")
    return int(match[1], 16)
