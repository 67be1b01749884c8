"""The NDJSON parser: one payload a non-blank line, whatever the read boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.common.errors import OVERSIZED_EVENT, StreamError
from tpot_locust.wire.ndjson import NDJSONParser
from tpot_locust.wire.sse import BOM


def splits(stream: bytes) -> list[list[int]]:
    """Read boundaries: none, each single cut, every byte."""
    return [[], *([cut] for cut in range(1, len(stream))), list(range(1, len(stream)))]


def parse(stream: bytes, cuts: list[int], max_event_bytes: int = 1000) -> list[bytes]:
    parser = NDJSONParser(max_event_bytes)
    events: list[bytes] = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        events += parser.feed(stream[previous:cut])
        previous = cut
    return events + parser.close()


VECTORS: dict[str, tuple[bytes, list[bytes]]] = {
    "lf": (b'{"a":1}\n{"b":2}\n', [b'{"a":1}', b'{"b":2}']),
    "crlf": (b'{"a":1}\r\n{"b":2}\r\n', [b'{"a":1}', b'{"b":2}']),
    "blank-lines": (b'\n\r\n{"a":1}\n  \n\t\r\n{"b":2}\n\n', [b'{"a":1}', b'{"b":2}']),
    "final-line-without-lf": (b'{"a":1}\n{"done":true}', [b'{"a":1}', b'{"done":true}']),
    "final-line-cr-without-lf": (b'{"a":1}\r\n{"done":true}\r', [b'{"a":1}', b'{"done":true}']),
    "bom": (BOM + b'{"a":1}\n', [b'{"a":1}']),
    "bom-only-at-start": (b'{"a":1}\n' + BOM + b"{}\n", [b'{"a":1}', BOM + b"{}"]),
    "two-boms": (BOM + BOM + b"{}\n", [BOM + b"{}"]),
    "cr-alone-is-no-line-end": (b"{}\r{}\n", [b"{}\r{}"]),
    "not-an-object": (b"[1]\n2\n", [b"[1]", b"2"]),
    "leading-space-kept": (b' {"a":1}\n', [b' {"a":1}']),
    "empty": (b"", []),
    "bom-alone": (BOM, []),
}


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_vector_at_every_split(name: str) -> None:
    stream, expected = VECTORS[name]
    for cuts in splits(stream):
        assert parse(stream, cuts) == expected, cuts


def test_each_line_comes_out_of_the_read_that_ends_it() -> None:
    parser = NDJSONParser()
    assert not parser.at_event_start(10)  # a BOM may be arriving
    assert parser.feed(b'{"a":1}\n') == [b'{"a":1}']
    assert parser.at_event_start(10)
    assert parser.feed(b'{"b":2}\r\n{"c"') == [b'{"b":2}']
    assert parser.pending and not parser.at_event_start(10)
    assert parser.feed(b":3}\n") == [b'{"c":3}']
    assert not parser.pending
    assert parser.close() == []


def test_an_over_long_line_keeps_the_lines_before_it() -> None:
    parser = NDJSONParser(max_event_bytes=10)
    assert parser.feed(b"{}\n" + b"x" * 20 + b"\n{}\n") == [b"{}"]
    assert parser.failure is not None and parser.failure.category == OVERSIZED_EVENT
    with pytest.raises(StreamError):
        parser.feed(b"{}\n")
    with pytest.raises(StreamError) as raised:
        NDJSONParser(max_event_bytes=10).feed(b"x" * 20)  # unfinished, already too long
    assert raised.value.category == OVERSIZED_EVENT
    # exactly the limit, CRLF ended, split anywhere: fine
    line = b"y" * 10 + b"\r\n"
    for cuts in splits(line):
        assert parse(line, cuts, max_event_bytes=10) == [b"y" * 10]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"{}", b"\n", b"\r", b" ", b"\xef", b"\xbb", b"\xbf", b"x"]), max_size=40
    ),
    st.lists(st.integers(min_value=0, max_value=60), max_size=10),
)
def test_any_split_gives_the_lines_of_the_whole(pieces: list[bytes], cuts: list[int]) -> None:
    data = b"".join(pieces)
    body = data[3:] if data.startswith(BOM) else data
    lines = [line[:-1] if line[-1:] == b"\r" else line for line in body.split(b"\n")]
    expected = [line for line in lines if line.strip()]
    assert parse(data, sorted({c for c in cuts if 0 < c < len(data)})) == expected
