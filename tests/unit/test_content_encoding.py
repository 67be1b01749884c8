"""Compressed bodies: we ask for none, and decode gzip and deflate read by read, bounded.

A server (or a proxy in front of it) may gzip an event stream although the request said
``Accept-Encoding: identity``; its events must come out as they would uncompressed, at
every read boundary, chunked or not, and a decompression bomb must be cut off by the
event size limit, not fill memory.
"""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from tests.helpers.scripted_server import Script, chunk, request, scripted_server
from tpot_locust.common.errors import BAD_HTTP, NOT_SSE, OVERSIZED_EVENT, StreamError
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.http_response import Response
from tpot_locust.wire.inflate import INFLATE_PIECE_BYTES, MAX_INFLATED_PER_READ
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.streaming import _not_a_stream, stream_request

EVENTS = [b'data: {"n": %d, "text": "%s"}\n\n' % (i, b"w" * i) for i in range(12)]
PLAIN = b"".join(EVENTS)


def response(headers: dict[str, str], status: int = 200) -> Response:
    return Response(
        status=status,
        reason="OK",
        headers={name.lower(): value for name, value in headers.items()},
        connection=HTTPConnection(Origin.parse("http://127.0.0.1:9")),
        first_body=b"",
        head_stamp_ns=0,
        deadline=Deadline.per_read(5.0),
    )


def flushed(events: list[bytes], wbits: int) -> list[bytes]:
    """Each event compressed and flushed on its own, as a streaming server writes them."""
    compressor = zlib.compressobj(wbits=wbits)
    pieces = [compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH) for event in events]
    return [*pieces, compressor.flush()]


def body_reads(headers: dict[str, str], body: bytes, cuts: list[int]) -> tuple[bytes, bool]:
    """The payload handed on when ``body`` arrives in reads cut at ``cuts``; whether the
    body ended (by its framing)."""
    got: list[bytes] = []
    reply = response(headers)

    def consume(_stamp: int, payload: bytes) -> None:
        assert len(payload) <= INFLATE_PIECE_BYTES
        got.append(payload)

    ended = reply.begin(consume)
    previous = 0
    for cut in [*cuts, len(body)]:
        assert not ended
        ended = reply.absorb(body[previous:cut], cut, consume)
        previous = cut
    return b"".join(got), ended


def splits(body: bytes) -> list[list[int]]:
    """Read boundaries: none, each single cut, every byte."""
    return [[], *([cut] for cut in range(1, len(body))), list(range(1, len(body)))]


GZIP_STREAM = b"".join(flushed(EVENTS, 16 + zlib.MAX_WBITS))
CASES = {
    "gzip": ({"Content-Encoding": "gzip"}, GZIP_STREAM),
    "x-gzip": ({"Content-Encoding": "X-Gzip"}, GZIP_STREAM),
    "deflate-zlib": ({"Content-Encoding": "deflate"}, b"".join(flushed(EVENTS, zlib.MAX_WBITS))),
    "deflate-raw": ({"Content-Encoding": "deflate"}, b"".join(flushed(EVENTS, -zlib.MAX_WBITS))),
    "gzip-members": (
        {"Content-Encoding": "gzip"},
        gzip.compress(PLAIN[:50]) + gzip.compress(PLAIN[50:]),
    ),
    "gzip-chunked": (
        {"Content-Encoding": "gzip", "Transfer-Encoding": "chunked"},
        b"".join(chunk(piece) for piece in flushed(EVENTS, 16 + zlib.MAX_WBITS) if piece)
        + b"0\r\n\r\n",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_compressed_body_decodes_at_every_split(name: str) -> None:
    headers, body = CASES[name]
    for cuts in splits(body):
        framed = dict(headers)
        if "Transfer-Encoding" not in framed:
            framed["Content-Length"] = str(len(body))
        assert body_reads(framed, body, cuts) == (PLAIN, True), cuts


def test_each_flushed_event_comes_out_of_its_own_read() -> None:
    """A server that flushes per event is read event by event: nothing waits for more."""
    reply = response({"Content-Encoding": "gzip", "Transfer-Encoding": "chunked"})
    parser = SSEParser()
    for event, piece in zip(EVENTS, flushed(EVENTS, 16 + zlib.MAX_WBITS), strict=False):
        assert parser.feed(reply.take(chunk(piece))) == [event[6:-2]]
        assert not reply.settle()


def test_a_close_delimited_gzip_body_is_complete_only_when_the_gzip_stream_is() -> None:
    for body, complete in ((GZIP_STREAM, True), (GZIP_STREAM[:-6], False)):
        reply = response({"Content-Encoding": "gzip"})
        got: list[bytes] = []
        assert not reply.absorb(body, 1, lambda _s, p, got=got: got.append(p))
        assert reply.absorb(b"", 2, lambda _s, p, got=got: got.append(p))  # the peer closed
        assert reply.complete is complete
        assert b"".join(got) == PLAIN  # all that came, even without the gzip trailer


def test_a_corrupt_or_cut_gzip_body_is_bad_http() -> None:
    corrupt = bytearray(GZIP_STREAM)
    corrupt[12] ^= 0xFF
    for body in (bytes(corrupt), b"not gzip at all", GZIP_STREAM[:-4]):
        with pytest.raises(StreamError) as raised:
            body_reads({"Content-Encoding": "gzip", "Content-Length": str(len(body))}, body, [])
        assert raised.value.category == BAD_HTTP
        assert raised.value.message.startswith("bad gzip body")
    deflate = b"".join(flushed(EVENTS, zlib.MAX_WBITS)) + b"tail"
    with pytest.raises(StreamError) as raised:
        body_reads(
            {"Content-Encoding": "deflate", "Content-Length": str(len(deflate))}, deflate, []
        )
    assert raised.value.category == BAD_HTTP and "deflate" in raised.value.message


def test_an_empty_gzip_body_is_an_empty_body() -> None:
    """A 204 or an empty error body labelled gzip: no compressed stream, no error."""
    got: list[bytes] = []
    reply = response({"Content-Encoding": "gzip", "Content-Length": "0"})
    assert reply.begin(lambda _stamp, payload: got.append(payload))
    assert reply.complete and not got


def test_a_decompression_bomb_is_cut_off_by_the_event_limit() -> None:
    """64 MiB of one event in 64 KiB on the wire: decoded a piece at a time, the parser's
    4 MiB event limit stops it after about 4 MiB, whatever one read would expand to."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    block = b"x" * (1 << 20)
    bomb = compressor.compress(b"data: ") + b"".join(compressor.compress(block) for _ in range(64))
    bomb += compressor.flush()
    assert len(bomb) < 128 * 1024
    reply = response({"Content-Encoding": "gzip", "Content-Length": str(len(bomb))})
    parser = SSEParser()
    handed: list[int] = []

    def consume(_stamp: int, payload: bytes) -> None:
        handed.append(len(payload))
        parser.feed(payload)

    with pytest.raises(StreamError) as raised:
        reply.absorb(bomb, 1, consume)  # the whole bomb in one read
    assert raised.value.category == OVERSIZED_EVENT
    assert max(handed) <= INFLATE_PIECE_BYTES
    assert sum(handed) <= parser.max_event_bytes + INFLATE_PIECE_BYTES


def test_a_bomb_of_line_ends_is_cut_off_by_the_per_read_limit() -> None:
    """Blank lines make no event, so the event limit never stops them: 64 MiB of them in
    one read once held the loop seconds. The read's own limit ends the request."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    bomb = b"".join(compressor.compress(b"\n" * (1 << 20)) for _ in range(64)) + compressor.flush()
    reply = response({"Content-Encoding": "gzip", "Content-Length": str(len(bomb))})
    parser = SSEParser()
    handed: list[int] = []

    def consume(_stamp: int, payload: bytes) -> None:
        handed.append(len(payload))
        parser.feed(payload)

    with pytest.raises(StreamError) as raised:
        reply.absorb(bomb, 1, consume)
    assert raised.value.category == BAD_HTTP and "decompression bomb" in raised.value.message
    assert sum(handed) <= MAX_INFLATED_PER_READ + INFLATE_PIECE_BYTES


def test_the_request_asks_for_no_compression() -> None:
    connection = HTTPConnection(Origin.parse("http://127.0.0.1:9"))
    message = connection._message("POST", "/v1/x", {"Content-Type": "application/json"}, b"{}")
    assert b"\r\nAccept-Encoding: identity\r\n" in message
    for name in ("Accept-Encoding", "accept-encoding", "ACCEPT-ENCODING"):
        message = connection._message("POST", "/v1/x", {name: "gzip"}, b"{}")
        assert message.lower().count(b"accept-encoding") == 1
        assert b"identity" not in message


def test_which_replies_are_event_streams() -> None:
    def why(headers: dict[str, str], media_types: tuple[str, ...] | None = None) -> str | None:
        reply = response(headers)
        found = _not_a_stream(reply) if media_types is None else _not_a_stream(reply, media_types)
        return None if found is None else f"{found.category}: {found.message}"

    sse = {"Content-Type": "text/event-stream"}
    assert why(sse) is None
    assert why({"Content-Type": "Text/Event-Stream; charset=utf-8"}) is None
    assert why({"Content-Type": " TEXT/EVENT-STREAM "}) is None
    for encoding in ("gzip", "x-gzip", "deflate", "identity", "GZIP"):
        assert why({**sse, "Content-Encoding": encoding}) is None
    for encoding in ("br", "zstd", "gzip, br"):
        assert why({**sse, "Content-Encoding": encoding}) == (
            f"{NOT_SSE}: HTTP 200 with Content-Encoding: {encoding}, not an event stream"
        )
    assert why({"Content-Type": "application/json"}) == (
        f"{NOT_SSE}: HTTP 200 with a application/json body, not an event stream"
    )
    assert why({"Content-Type": "application/text/event-stream"}) is not None
    ndjson = ("application/x-ndjson", "application/jsonl")
    assert why({"Content-Type": "application/x-ndjson"}, ndjson) is None
    assert why({"Content-Type": "Application/JSONL; charset=utf-8"}, ndjson) is None
    assert why(sse, ndjson) == (
        f"{NOT_SSE}: HTTP 200 with a text/event-stream body, not an event stream"
    )


def test_a_gzipped_chunked_stream_is_measured_like_a_plain_one() -> None:
    """Through a real socket: each event flushed and written 2 ms apart is stamped on its
    own, and the stream counts as complete."""

    def event(text: str, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"

    events = [event(f" w{i}") for i in range(20)] + [event("", "length"), b"data: [DONE]\n\n"]
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    pieces = flushed(events, 16 + zlib.MAX_WBITS)
    steps = [(0.0, head)] + [(0.01 + i * 0.002, chunk(p)) for i, p in enumerate(pieces[:-1])]
    steps.append((0.1, chunk(pieces[-1]) + b"0\r\n\r\n"))
    with scripted_server([Script(steps)]) as url:
        connection = HTTPConnection(Origin.parse(url))
        timings, text = stream_request(connection, request())
        connection.close()
    assert timings.ok, timings.error_message
    assert text == "".join(f" w{i}" for i in range(20))
    assert len(timings.token_stamps) == 20
    assert timings.finish_reason == "length"


def test_input_left_undecoded_comes_before_the_next_read() -> None:
    """``take`` alone (no ``absorb`` to drain it) loses nothing: the next read's bytes are
    decoded after what the last one left."""
    body = gzip.compress(b"y" * (3 * INFLATE_PIECE_BYTES) + b"end")
    reply = response({"Content-Encoding": "gzip", "Content-Length": str(len(body))})
    first = reply.take(body[:-8])
    assert len(first) == INFLATE_PIECE_BYTES
    rest = reply.take(body[-8:])
    got = [first, rest]
    while piece := reply._inflater.next_piece():  # type: ignore[union-attr]
        got.append(piece)
    assert b"".join(got) == b"y" * (3 * INFLATE_PIECE_BYTES) + b"end"
    assert reply.settle()
