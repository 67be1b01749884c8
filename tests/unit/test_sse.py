"""The SSE parser: any split of the bytes gives the same events; bad input fails clearly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.common.errors import OVERSIZED_EVENT, StreamError
from tpot_locust.wire.sse import SSEParser

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b'data: {"b": 2}\r\n\r\n'
    b"event: message\nid: 7\ndata: line one\ndata: line two\n\n"
    b"data:no-space\r\rdata: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b": 2}', b"line one\nline two", b"no-space", b"[DONE]"]


def parse_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    parser = SSEParser()
    events: list[bytes] = []
    previous = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        events += parser.feed(data[previous:cut])
        previous = cut
    return events + parser.close()


def test_whole_stream_in_one_read() -> None:
    assert parse_in_pieces(STREAM, []) == EXPECTED


def test_byte_by_byte() -> None:
    assert parse_in_pieces(STREAM, list(range(len(STREAM)))) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    assert parse_in_pieces(STREAM, cuts) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(min_size=0, max_size=30).filter(lambda s: "\n" not in s and "\r" not in s),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=400), max_size=20),
)
def test_generated_streams_any_line_ending(
    payloads: list[str], newline: bytes, cuts: list[int]
) -> None:
    data = b"".join(b"data: " + p.encode() + newline + newline for p in payloads)
    expected = [p.encode() for p in payloads]
    assert parse_in_pieces(data, [c for c in cuts if c <= len(data)]) == expected


def test_several_events_in_one_read_come_out_in_order() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\nda") == [b"1", b"2", b"3"]
    assert parser.feed(b"ta: 4\n\n") == [b"4"]


def test_unfinished_event_at_close_is_dropped() -> None:
    """The spec drops an event that no blank line ended; the decoder judges the stream."""
    parser = SSEParser()
    assert parser.feed(b'data: 1\n\ndata: {"partial') == [b"1"]
    assert parser.close() == []


def test_oversized_event_is_categorised() -> None:
    parser = SSEParser(max_event_bytes=1000)
    with pytest.raises(StreamError) as raised:
        parser.feed(b"data: " + b"x" * 2000)
    assert raised.value.category == OVERSIZED_EVENT


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=10))
def test_random_bytes_never_hang_or_raise(data: bytes, cuts: list[int]) -> None:
    """Within the event limit nothing is an error: not even an unfinished event at close."""
    parse_in_pieces(data, [c for c in cuts if c <= len(data)])
