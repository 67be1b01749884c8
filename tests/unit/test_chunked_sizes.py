"""Chunk sizes are 1*HEXDIG (RFC 9112), in the fast paths and the state machine alike.

Vectors from llhttp's and h11's chunked-encoding tests: what Python's ``int(s, 16)``
also takes (a ``0x`` prefix, ``_``, a sign, leading space, 17+ digits) is bad framing,
refused by the read that brings the first byte that makes it so, at every split.
"""

from __future__ import annotations

import pytest

from tpot_locust.common.errors import BAD_HTTP, StreamError
from tpot_locust.wire.chunked import ChunkedDecoder


def splits(body: bytes) -> list[list[int]]:
    """Read boundaries: none, each single cut, every byte."""
    return [[], *([cut] for cut in range(1, len(body))), list(range(1, len(body)))]


GOOD: dict[str, tuple[bytes, bytes]] = {
    "plain": (b"5\r\nhello\r\n0\r\n\r\n", b"hello"),
    "upper-and-lower": (
        b"A\r\n0123456789\r\nb\r\n0123456789a\r\n0\r\n\r\n",
        b"0123456789" * 2 + b"a",
    ),
    "leading-zeros": (b"0005\r\nhello\r\n000\r\n\r\n", b"hello"),
    "sixteen-digits": (b"0000000000000005\r\nhello\r\n0\r\n\r\n", b"hello"),
    "extension": (b"5;name=value\r\nhello\r\n0;last\r\n\r\n", b"hello"),
    "bws-before-extension": (b'5 \t;name="v"\r\nhello\r\n0\r\n\r\n', b"hello"),
    "trailing-bws": (b"5 \r\nhello\r\n0\r\n\r\n", b"hello"),
    "trailers": (b"2\r\nab\r\n0\r\nX-Trailer: 1\r\n\r\n", b"ab"),
}

# body, index of the first byte that makes it bad framing
BAD: dict[str, tuple[bytes, int]] = {
    "0x-prefix": (b"0x5\r\nhello\r\n", 1),
    "underscore": (b"1_0\r\n0123456789abcdef\r\n", 1),
    "plus": (b"+5\r\nhello\r\n", 0),
    "minus": (b"-5\r\nhello\r\n", 0),
    "leading-space": (b" 5\r\nhello\r\n", 0),
    "leading-tab": (b"\t5\r\nhello\r\n", 0),
    "empty": (b"\r\nhello\r\n", 0),
    "seventeen-digits": (b"00000000000000005\r\nhello\r\n", 16),
    "hundred-digits": (b"f" * 100 + b"\r\n", 16),
    "not-hex": (b"5g\r\nhello\r\n", 1),
    "bare-lf": (b"5\nhello\r\n", 1),
    "space-inside": (b"5 5\r\nhello\r\n", 2),
    "after-good-chunk": (b"2\r\nab\r\n0x5\r\nhello\r\n", 8),
}


def feed_all(body: bytes, cuts: list[int]) -> bytes:
    decoder = ChunkedDecoder()
    payload = b""
    previous = 0
    for cut in [*cuts, len(body)]:
        payload += decoder.feed(body[previous:cut])
        previous = cut
    assert decoder.done
    return payload


@pytest.mark.parametrize("name", sorted(GOOD))
def test_good_sizes_at_every_split(name: str) -> None:
    body, expected = GOOD[name]
    for cuts in splits(body):
        assert feed_all(body, cuts) == expected, cuts


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_sizes_fail_in_the_read_that_brings_them(name: str) -> None:
    body, bad_at = BAD[name]
    for cuts in splits(body):
        decoder = ChunkedDecoder()
        payload = b""
        previous = 0
        failed_in: tuple[int, int] | None = None
        for cut in [*cuts, len(body)]:
            try:
                payload += decoder.feed(body[previous:cut])
            except StreamError as error:
                assert error.category == BAD_HTTP
                failed_in = (previous, cut)
                break
            if decoder.failure is not None:  # good payload came first in that read
                failed_in = (previous, cut)
                break
            previous = cut
        assert failed_in is not None, (cuts, payload)  # never waits for more bytes
        assert failed_in[0] <= bad_at < failed_in[1], (cuts, failed_in)
        assert payload in (b"", b"ab")  # nothing of the badly framed chunk


def test_the_one_chunk_fast_paths_agree_with_the_state_machine() -> None:
    for read in (b"0x5\r\nhello\r\n", b"+5\r\nhello\r\n", b"1_0\r\n0123456789abcdef\r\n"):
        with pytest.raises(StreamError):
            ChunkedDecoder().feed(read)  # ``feed``'s one-chunk path
        decoder = ChunkedDecoder()
        assert decoder.feed(b"2\r\nab\r\n" + read) == b"ab"  # ``_whole_chunks``
        assert decoder.failure is not None and decoder.failure.category == BAD_HTTP
