"""The SSE parser against test vectors of other event-stream readers, split at every byte.

Vectors from web-platform-tests' ``eventsource/format-*`` tests and the line-end, BOM
and end-of-stream cases of eventsource-parser and httpx-sse. Each is read whole, cut in
two at every byte, and a byte a read; every event must come out of the read that holds
the line end that dispatches it (a spec-literal reader below says where that is), never
later: a CR ending a read ends its line at once.
"""

from __future__ import annotations

import pickle

import pytest

from tpot_locust.common.errors import OVERSIZED_EVENT, StreamError
from tpot_locust.wire.sse import BOM, MAX_EVENT_BYTES_LIMIT, SSEEvent, SSEParser

CR, LF = 13, 10


def reference(stream: bytes) -> list[tuple[bytes, str | None, int]]:
    """The WHATWG "interpreting an event stream" steps, literally: each event's data, its
    name (None: ``message``) and the index of the line end that dispatches it."""
    position = 3 if stream.startswith(BOM) else 0
    events: list[tuple[bytes, str | None, int]] = []
    data: list[bytes] = []
    name = b""
    line_start = index = position
    while index < len(stream):
        if stream[index] not in (CR, LF):
            index += 1
            continue
        line = stream[line_start:index]
        if not line:
            if data:
                named = name.decode("utf-8", "replace") if name not in (b"", b"message") else None
                events.append((b"\n".join(data), named, index))
            data, name = [], b""
        elif line[:1] != b":":
            field, _, value = line.partition(b":")
            value = value[1:] if value[:1] == b" " else value
            if field == b"data":
                data.append(value)
            elif field == b"event":
                name = value
        if stream[index] == CR and stream[index + 1 : index + 2] == b"\n":
            index += 1
        index += 1
        line_start = index
    return events  # an event no blank line ended is dropped


def splits(stream: bytes) -> list[list[int]]:
    """Read boundaries: none, each single cut, every byte."""
    return [[], *([cut] for cut in range(1, len(stream))), list(range(1, len(stream)))]


def read_at(stream: bytes, cuts: list[int]) -> list[tuple[bytes, str | None, int, int]]:
    """Each event with its name and the byte range of the read that gave it."""
    parser = SSEParser()
    got: list[tuple[bytes, str | None, int, int]] = []
    previous = 0
    for cut in [*cuts, len(stream)]:
        for event in parser.feed(stream[previous:cut]):
            named = event.name if type(event) is SSEEvent else None
            assert type(event) in (bytes, SSEEvent)
            got.append((bytes(event), named, previous, cut))
        previous = cut
    assert parser.close() == []
    return got


def check_every_split(stream: bytes, expected: list[bytes | tuple[bytes, str]]) -> None:
    wanted = [(e, None) if isinstance(e, bytes) else e for e in expected]
    spec = reference(stream)
    assert [(data, name) for data, name, _ in spec] == wanted  # the vector as specified
    for cuts in splits(stream):
        got = read_at(stream, cuts)
        assert [(data, name) for data, name, _, _ in got] == wanted, cuts
        for (_, _, start, end), (_, _, at) in zip(got, spec, strict=True):
            assert start <= at < end, f"event dispatched at byte {at} came in read {start}:{end}"


VECTORS: dict[str, tuple[bytes, list[bytes | tuple[bytes, str]]]] = {
    # web-platform-tests eventsource/format-*
    "bom": (BOM + b"data:1\n\ndata:2\n\ndata:3\n\n", [b"1", b"2", b"3"]),
    "bom-2": (BOM + BOM + b"data:1\n\ndata:2\n\ndata:3\n\n", [b"2", b"3"]),  # only one BOM
    "comments": (
        b"data:1\r:\0\n:\r\ndata:2\n:"
        + b"x" * 300
        + b"\rdata:3\n:data:fail\r:"
        + b"y" * 300
        + b"\ndata:4\n\n",
        [b"1\n2\n3\n4"],
    ),
    "data-before-final-empty-line": (b"retry:1000\ndata:test1\n\nid:test\ndata:test2", [b"test1"]),
    "field-data": (b"data:\n\ndata\ndata\n\ndata:test\n\n", [b"", b"\n", b"test"]),
    "field-event": (b"event:test\ndata:x\n\ndata:x\n\n", [(b"x", "test"), b"x"]),
    "field-event-empty": (b"event: \ndata:data\n\n", [b"data"]),
    "field-id": (b"id:1\ndata:x\n\nid:\ndata:y\n\n", [b"x", b"y"]),
    "field-parsing": (
        b"data:\0\ndata:  2\rData:1\ndata\0:2\ndata:1\r\0data:4\nda-ta:3\rdata_5\ndata:3\r"
        b"data:\r\n data:32\ndata:4\n\n",
        [b"\0\n 2\n1\n3\n\n4"],
    ),
    "field-retry": (b"retry:03000\ndata:x\nretry:1000x\ndata:x\n\n", [b"x\nx"]),
    "field-unknown": (
        b"data:test\n data\ndata\nfoobar:xxx\njustsometext\n:thisisacommentyay\ndata:test\n\n",
        [b"test\n\ntest"],
    ),
    "leading-space": (b"data:\x20\x20test\n\n", [b" test"]),
    "newlines": (b"data:test\r\ndata\ndata:test\r\n\r", [b"test\n\ntest"]),
    "null-character": (b"data:\0\n\n\n\n", [b"\0"]),
    "utf-8": (b"data:ok\xe2\x80\xa6\n\n", [b"ok\xe2\x80\xa6"]),
    # line ends and their splits (eventsource-parser, httpx-sse)
    "crlf-blank-line-then-lf": (b"data: x\r\n\r\n", [b"x"]),
    "cr-only": (b"data: x\r\rdata: y\r\r", [b"x", b"y"]),
    "cr-only-multiline": (b"data: a\rdata: b\r\revent: e\rdata: c\r\r", [b"a\nb", (b"c", "e")]),
    "mixed-line-ends": (b"data: 1\r\n\ndata: 2\n\r\ndata: 3\r\r\n", [b"1", b"2", b"3"]),
    "lf-after-cr-line-is-blank": (b"data: a\r\r\ndata: b\n\n", [b"a", b"b"]),
    "bom-then-cr": (BOM + b"data: x\r\r", [b"x"]),
    "bom-mid-stream-is-data": (b"data: a\n\n" + BOM + b"data: b\n\n", [b"a"]),
    "bom-inside-data": (b"data: " + BOM + b"\n\n", [b"\xef\xbb\xbf"]),
    # named events; no data, no event
    "event-without-data": (b"event: ping\n\ndata: x\n\n", [b"x"]),
    "event-message-is-unnamed": (b"event: message\ndata: x\n\n", [b"x"]),
    "event-last-name-wins": (b"event: a\nevent: b\ndata: x\n\n", [(b"x", "b")]),
    "event-name-reset-after-dispatch": (b"event: a\ndata: 1\n\ndata: 2\n\n", [(b"1", "a"), b"2"]),
    "event-name-reset-without-data": (b"event: a\n\ndata: 2\n\n", [b"2"]),
    "error-event": (
        b'event: error\ndata: {"message": "overloaded"}\n\n',
        [(b'{"message": "overloaded"}', "error")],
    ),
    "unfinished-done-at-close": (b'data: {"a": 1}\n\ndata: [DONE]', [b'{"a": 1}']),
    "unfinished-done-line-ended-at-close": (b"data: 1\n\ndata: [DONE]\n", [b"1"]),
    "unfinished-done-cr-at-close": (b"data: 1\r\rdata: [DONE]\r", [b"1"]),
}


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_vector_at_every_split(name: str) -> None:
    stream, expected = VECTORS[name]
    check_every_split(stream, expected)


def test_a_cr_ending_a_read_dispatches_in_that_read() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\r\n\r") == [b"x"]
    assert not parser.at_event_start(10)  # the LF of that CRLF may start the next read
    assert parser.feed(b"\n") == []
    assert parser.at_event_start(10)
    assert parser.feed(b"data: y\r\r") == [b"y"]
    assert parser.feed(b"data: z\r\r") == [b"z"]  # no LF came: nothing dropped
    assert parser.close() == []


def test_a_bom_split_across_reads_is_stripped_only_at_the_start() -> None:
    parser = SSEParser()
    assert not parser.at_event_start(10)  # a BOM may be arriving
    assert parser.feed(b"\xef") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"\xbb") == []
    assert not parser.at_event_start(10)
    assert parser.feed(b"\xbfdata: 1\n\n") == [b"1"]
    assert parser.at_event_start(10)
    assert parser.feed(BOM + b"data: 2\n\n") == []  # a field named "\ufeffdata"
    # no BOM at all: the first read is taken as it is
    assert SSEParser().feed(b"data: 3\n\n") == [b"3"]
    assert SSEParser().feed(b"\xefdata: 4\n\n") == []  # one byte of one is no BOM


def test_named_events_are_bytes_with_a_name() -> None:
    plain, named = SSEParser().feed(b"data: a\n\nevent: delta\ndata: b\n\n")
    assert type(plain) is bytes
    assert type(named) is SSEEvent and isinstance(named, bytes)
    assert named == b"b" and named.name == "delta"
    assert repr(named) == "SSEEvent(b'b', name='delta')"
    again = pickle.loads(pickle.dumps(named))
    assert type(again) is SSEEvent and again == b"b" and again.name == "delta"


def test_an_event_name_is_decoded_and_bounded() -> None:
    (event,) = SSEParser().feed(b"event: caf\xc3\xa9\xff\ndata: x\n\n")
    assert event.name == "caf\u00e9\ufffd"
    (event,) = SSEParser().feed(b"event: " + "\u00e9".encode() * 1000 + b"\ndata: x\n\n")
    assert event.name == "\u00e9" * 128


def test_an_oversized_event_after_good_ones_keeps_them() -> None:
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: 1\r\rdata: " + b"x" * 200 + b"\r\r") == [b"1"]
    assert parser.failure is not None and parser.failure.category == OVERSIZED_EVENT
    with pytest.raises(StreamError):
        parser.close()


def test_the_event_limit_is_bounded() -> None:
    assert MAX_EVENT_BYTES_LIMIT == 256 * 1024 * 1024
    assert SSEParser(MAX_EVENT_BYTES_LIMIT).max_event_bytes == MAX_EVENT_BYTES_LIMIT
    for wrong in (0, MAX_EVENT_BYTES_LIMIT + 1):
        with pytest.raises(ValueError):
            SSEParser(wrong)
