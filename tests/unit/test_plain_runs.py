"""A read taken as a run of plain token events records exactly what taking it piece by
piece records (stamps, counts, text, the end), however the stream was cut into segments
and reads; whatever is not a run of whole plain events goes the usual way."""

from __future__ import annotations

import itertools
import json
import random
from bisect import bisect_right
from itertools import accumulate

import pytest

from tests.helpers.scripted_server import DONE, FINISH, chunk
from tpot_locust.common.errors import TIMEOUT_TOTAL, StreamError
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.http_response import Response
from tpot_locust.wire.plain_runs import PlainRuns
from tpot_locust.wire.segment_stamps import SegmentTrack
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import DecodedStream, StreamDecoder, feed_read

ROLE = chunk(b'data: {"choices":[{"delta":{"role":"assistant"},"finish_reason":null}]}\n\n')


def plain(text: str, stream_id: str = "chatcmpl-1") -> bytes:
    """A plain token event as vLLM writes it (compact JSON), one chunk."""
    event = {
        "id": stream_id,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return chunk(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")


def other_frame(text: str) -> bytes:
    """A plain token event in another frame (an id the stream's events did not have)."""
    return plain(text, "chatcmpl-2")


def with_extension(event_chunk: bytes) -> bytes:
    """The chunk with a chunk extension after its size (legal; never in a run)."""
    size, rest = event_chunk.split(b"\r\n", 1)
    return size + b";ext=1\r\n" + rest


# Plain events, and among them what a run must not take: an escape, a quote, a text that
# ends in a backslash, another frame, a chunk with an extension, two events in one chunk.
BODY = b"".join(
    [
        ROLE,
        *[plain(f" t{i}") for i in range(40)],
        plain(' say "hi"'),
        plain(" caf\u00e9"),
        plain("back\\"),
        plain(" t40"),
        plain(" t41"),
        other_frame(" o1"),
        plain(" t42"),
        plain(" t43"),
        with_extension(plain(" t44")),
        plain(" t45"),
        plain(" t46"),
        chunk(plain(" t47")[4:-2] + plain(" t48")[4:-2]),
        plain(" t49"),
        plain(" t50"),
        FINISH,
        DONE,
    ]
)


def segments(rng: random.Random) -> list[tuple[bytes, int]]:
    """The body cut where a server's writes end (chunk ends), and now and then elsewhere,
    each segment stamped 1 ms after the one before."""
    cuts = {0, len(BODY)}
    at = 0
    while (at := BODY.find(b"\r\n", at) + 2) > 1:
        if rng.random() < 0.5:
            cuts.add(at)
    cuts |= {rng.randrange(1, len(BODY)) for _ in range(10)}
    ends = sorted(cuts)
    return [(BODY[a:b], 1_000_000 * (i + 1)) for i, (a, b) in enumerate(itertools.pairwise(ends))]


def reads(pieces: list[tuple[bytes, int]], rng: random.Random) -> list[list[tuple[bytes, int]]]:
    """The segments gathered into reads of 1 to 8 segments each."""
    grouped, at = [], 0
    while at < len(pieces):
        size = rng.randint(1, 8)
        grouped.append(pieces[at : at + size])
        at += size
    return grouped


class Stream:
    """One stream's parsing state, fed as ``streaming`` feeds it (one ``consume`` a piece)."""

    def __init__(self, total_timeout: float = 60.0) -> None:
        self.deadline = Deadline(5.0, 5.0, total_timeout)
        self.deadline.start(0)
        self.response = Response(
            200, "OK", {"transfer-encoding": "chunked"}, None, b"", 0, self.deadline
        )  # type: ignore[arg-type]
        self.parser = SSEParser()
        self.decoder = StreamDecoder("chat")
        self.runs = PlainRuns(
            self.response, self.parser, self.decoder, self.deadline, total_timeout
        )
        self.run_events = 0

    def consume(self, stamp: int, payload: bytes) -> None:
        if feed_read(self.parser, self.decoder, stamp, payload):
            self.deadline.arrived(stamp)
        if stamp >= self.deadline.end_ns:
            raise StreamError(TIMEOUT_TOTAL, "total")

    def piecewise(self, pieces: list[tuple[bytes, int]]) -> None:
        for data, stamp in pieces:
            if self.response.absorb(data, stamp, self.consume):
                return

    def in_runs(self, pieces: list[tuple[bytes, int]]) -> None:
        before = self.decoder.events
        rest = self.runs.take_pieces(pieces)
        self.run_events += self.decoder.events - before
        self.piecewise(pieces if rest is None else rest)


def decoded(stream: Stream) -> tuple[list[int], list[int], str, str | None, bool, bool]:
    result: DecodedStream = stream.decoder.finish()
    return (
        list(result.token_stamps),
        list(result.token_counts),
        result.text,
        result.finish_reason,
        result.done,
        stream.response.complete,
    )


@pytest.mark.parametrize("seed", range(30))
def test_runs_record_what_pieces_record(seed: int) -> None:
    rng = random.Random(seed)
    grouped = reads(segments(rng), rng)
    reference, taken = Stream(), Stream()
    for pieces in grouped:
        reference.piecewise(pieces)
        taken.in_runs(pieces)
    assert decoded(taken) == decoded(reference)
    assert taken.run_events > 0
    assert decoded(reference)[3] == "length" and decoded(reference)[5]
    assert len(decoded(reference)[0]) == 55


def test_whole_chunk_reads_are_taken_as_runs() -> None:
    pieces = [(BODY[a:b], 1_000 * i) for i, (a, b) in enumerate(chunk_bounds())]
    reference, taken = Stream(), Stream()
    reference.piecewise(pieces)
    for at in range(0, len(pieces), 6):
        taken.in_runs(pieces[at : at + 6])
    assert taken.run_events > 30  # the plain ones in reads of several, not the odd ones out
    assert decoded(taken) == decoded(reference)


def chunk_bounds() -> list[tuple[int, int]]:
    ends = [0]
    while ends[-1] < len(BODY):
        line_end = BODY.index(b"\r\n", ends[-1])
        size = int(BODY[ends[-1] : line_end].split(b";")[0], 16)
        ends.append(line_end + 2 + size + 2 if size else len(BODY))
    return list(itertools.pairwise(ends))


def test_a_run_past_the_total_timeout_keeps_the_event_that_crossed_it() -> None:
    body = b"".join([ROLE, plain(" a"), *[plain(f" t{i}") for i in range(10)]])
    pieces = [(body[a:b], 1_000_000_000 * i) for i, (a, b) in enumerate(pairs(body))]
    reference, taken = Stream(total_timeout=5.0), Stream(total_timeout=5.0)
    for feed in (reference.piecewise, taken.in_runs):
        feed(pieces[:2])
        with pytest.raises(StreamError):
            feed(pieces[2:])
    assert decoded(taken)[0] == decoded(reference)[0] == [i * 1_000_000_000 for i in range(1, 6)]


def pairs(body: bytes) -> list[tuple[int, int]]:
    ends = [0]
    while ends[-1] < len(body):
        line_end = body.index(b"\r\n", ends[-1])
        ends.append(line_end + 2 + int(body[ends[-1] : line_end], 16) + 2)
    return list(itertools.pairwise(ends))


def test_stamps_at_gives_each_byte_the_stamp_cut_gives_it() -> None:
    rng = random.Random(7)
    lengths = [rng.randint(1, 40) for _ in range(200)]
    track = SegmentTrack()
    track.synchronise(999)
    for length, seq in zip(lengths, accumulate([1000, *lengths]), strict=False):
        track.add(seq % (1 << 32), length, seq * 10)
    reference = SegmentTrack()
    reference.ends, reference.stamps = track.ends[:], track.stamps[:]
    offset = 0
    total = sum(lengths)
    while offset < total:
        size = min(rng.randint(1, 300), total - offset)
        lasts = sorted(rng.sample(range(size), min(size, 5)))
        pieces = reference.cut(offset, bytes(size))
        piece_ends = list(accumulate(len(data) for data, _ in pieces))
        first = pieces[0][1]
        piece_stamps = [stamp for _, stamp in pieces]
        expected = [first] + [piece_stamps[bisect_right(piece_ends, last)] for last in lasts]
        assert track.stamps_at(offset, size, lasts) == expected
        offset += size
    assert track.stamps_at(total, 1, [0]) is None  # nothing covers it: cut keeps what it can
