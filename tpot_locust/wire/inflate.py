"""A compressed response body (gzip, deflate) decoded read by read, in bounded pieces.

We ask for no compression (``Accept-Encoding: identity``); a server that compresses anyway
is still read. Decoding comes in pieces of at most ``INFLATE_PIECE_BYTES``, each handed on
before the next is made, so a decompression bomb is stopped by the event size limit or by
``MAX_INFLATED_PER_READ`` (``http_response.Response`` applies both).
"""

from __future__ import annotations

import zlib

from tpot_locust.common.errors import BAD_HTTP, StreamError

# The most body one decompression step makes; each piece is handed on before the next is made.
INFLATE_PIECE_BYTES = 256 * 1024
# A streaming server flushes each event: one read of it never inflates to more than a
# few events. Beyond this it is a bomb (or a huge event: raise it with max_event_bytes).
MAX_INFLATED_PER_READ = 16 * 1024 * 1024
_GZIP_WBITS = 16 + zlib.MAX_WBITS
# Content-Encoding values decoded here, with the zlib window bits they start with
DECODED_ENCODINGS = {"gzip": _GZIP_WBITS, "x-gzip": _GZIP_WBITS, "deflate": zlib.MAX_WBITS}


class Inflater:
    """Incremental gzip/deflate decoding of a body, in pieces of at most
    ``INFLATE_PIECE_BYTES``: input a piece leaves undecoded is kept (zlib's
    ``unconsumed_tail``) for ``next_piece``. Concatenated gzip members are one body (RFC
    1952); deflate is tried zlib-wrapped (RFC 9110), then raw, as browsers do. A corrupt
    body raises ``StreamError`` (``bad_http``)."""

    __slots__ = ("_encoding", "_fed", "_probe", "_tail", "_zlib", "more")

    def __init__(self, encoding: str) -> None:
        self._encoding = "deflate" if encoding == "deflate" else "gzip"
        self._zlib = zlib.decompressobj(DECODED_ENCODINGS[encoding])
        # deflate: the input so far while its first two bytes may still say it is raw
        self._probe: bytes | None = b"" if encoding == "deflate" else None
        self._tail = b""  # input still to decode
        self._fed = False
        self.more = False  # ``next_piece`` may give more

    @property
    def ended(self) -> bool:
        """The compressed stream is complete, or never began (an empty body)."""
        return not self._fed or (self._zlib.eof and not self.more)

    def feed(self, data: bytes) -> bytes:
        """The first piece of what ``data`` decodes to (``more``: there is more)."""
        self._fed = True
        if self.more:  # what the last input left undecoded comes first
            data = self._tail + data
        if self._probe is None:
            return self._step(data)
        self._probe += data
        try:
            piece = self._step(data)
        except StreamError:
            probe, self._probe = self._probe, None
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, no zlib header
            return self._step(probe)
        if len(self._probe) >= 2:  # zlib has checked its header
            self._probe = None
        return piece

    def next_piece(self) -> bytes:
        return self._step(self._tail) if self.more else b""

    def check_ended(self) -> None:
        """The body's framing ended: the compressed stream must have too."""
        if not self.ended:
            raise StreamError(BAD_HTTP, f"bad {self._encoding} body: the body ended inside it")

    def _step(self, data: bytes) -> bytes:
        decompressor = self._zlib
        try:
            piece = decompressor.decompress(data, INFLATE_PIECE_BYTES)
        except zlib.error as error:
            self.more = False
            raise StreamError(BAD_HTTP, f"bad {self._encoding} body: {error}") from None
        if decompressor.eof:
            rest = decompressor.unused_data
            if rest and self._encoding == "deflate":
                self.more = False
                raise StreamError(BAD_HTTP, "bad deflate body: bytes after its end")
            if rest:  # the next gzip member
                self._zlib = zlib.decompressobj(_GZIP_WBITS)
            self._tail, self.more = rest, bool(rest)
        else:
            self._tail = decompressor.unconsumed_tail
            self.more = bool(self._tail) or len(piece) == INFLATE_PIECE_BYTES
        return piece
