"""Fuzzing the whole receive path: HTTP head, chunked framing, SSE parsing, event decoding.

Whatever bytes arrive, split however the socket splits them, cut off anywhere, with
timeouts and resets at any read: ``stream_request`` returns (never hangs, never raises), the
failure is one of our categories, a valid stream still succeeds with the exact text and
token count, and the recorder puts a failed request's timings in no histogram.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tpot_locust.common import errors
from tpot_locust.common.clock import USER_CLOCK, stamp_ns
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.wire.chunked import ChunkedDecoder
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stamped_socket import StampedSocket
from tpot_locust.wire.stream_decoder import decode_events
from tpot_locust.wire.streaming import StreamRequest, stream_request

CATEGORIES = {value for name, value in vars(errors).items() if name.isupper()}
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TIMEOUT, RESET = object(), object()  # scripted socket events instead of bytes


class ScriptedSocket:
    """Stands in for a socket: each ``recv`` returns the next piece (or raises)."""

    def __init__(self, pieces: list[Any]) -> None:
        self.pieces = list(pieces)
        self.sent = b""

    def settimeout(self, _timeout: float | None) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.sent += data

    def recv(self, size: int) -> bytes:
        if not self.pieces:
            return b""
        piece = self.pieces.pop(0)
        if piece is TIMEOUT:
            raise TimeoutError()
        if piece is RESET:
            raise ConnectionResetError()
        if len(piece) > size:
            self.pieces.insert(0, piece[size:])
            piece = piece[:size]
        return piece

    def close(self) -> None:
        pass


class ScriptedConnection(HTTPConnection):
    def __init__(self, pieces: list[Any]) -> None:
        super().__init__(Origin.parse("http://127.0.0.1:9"), 1.0, 60.0)
        self._pieces = pieces

    def _connect(self) -> StampedSocket:
        self.connections_opened += 1
        scripted = ScriptedSocket(self._pieces if self.connections_opened == 1 else [])
        return StampedSocket(scripted, USER_CLOCK, ("127.0.0.1", 9))  # type: ignore[arg-type]


def request(api: str = "chat") -> StreamRequest:
    return StreamRequest(
        user_class="Fuzz",
        api=api,
        request_id="f",
        path="/v1/chat/completions",
        headers={"Authorization": "Bearer sk-fuzz"},
        body=b"{}",
        prompt_tokens_requested=1,
        first_token_timeout=60.0,
        idle_timeout=60.0,
        total_timeout=600.0,
        t_intended_ns=stamp_ns(),
    )


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut for cut in cuts if 0 < cut < len(data)})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def check_invariants(timings: Any, api: str = "chat") -> None:
    assert timings.error_category in CATEGORIES | {None}, timings.error_category
    # client_error is the category of our own bugs: no input may produce it
    assert timings.error_category != errors.CLIENT_ERROR, timings.error_message
    assert list(timings.token_stamps) == sorted(timings.token_stamps)
    assert len(timings.token_counts) == len(timings.token_stamps)
    assert all(k >= 1 for k in timings.token_counts)
    if timings.ok:
        assert timings.finish_reason is not None and timings.token_stamps
    recorder = Recorder()
    recorder.record(timings)
    totals = recorder.take_interval().classes["Fuzz"]
    counts = {name: h.total_count for name, h in totals.histograms.items()}
    # every gap counts, whatever the request's end (docs/metrics.md, "The window")
    assert counts.get("tpot", 0) == sum(timings.token_counts[1:])
    assert counts.get("itl", 0) == max(len(timings.token_stamps) - 1, 0)
    assert counts.get("ttft", 0) == (1 if timings.token_stamps else 0)
    if not timings.ok:  # but no whole-request figure of a failure
        assert not {"e2e", "request_tpot", "worst_gap"} & set(counts), counts
        assert totals.counters.partial_tokens == sum(timings.token_counts)


# ------------------------------------------------------------------ a valid stream


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, str, int]:
    """A valid chunked SSE response in vLLM's format; its text and token count."""
    texts = draw(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=12))
    newline = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    comments = draw(st.booleans())
    with_usage = draw(st.booleans())
    end_with_done = draw(st.booleans())
    events: list[bytes] = []

    def add(payload: dict[str, Any] | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        events.append(b"data: " + data.encode() + newline + newline)
        if comments:
            events.append(b": keep-alive" + newline + newline)

    add({"choices": [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
    for index, text in enumerate(texts):
        finish = "length" if index == len(texts) - 1 else None
        add({"choices": [{"delta": {"content": text}, "finish_reason": finish}]})
    if with_usage:
        add({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(texts)}})
    if end_with_done:
        add("[DONE]")
    body = b"".join(events)
    sizes = draw(st.lists(st.integers(min_value=1, max_value=64), max_size=20))
    chunks, position = [], 0
    for size in [*sizes, len(body)]:
        if position >= len(body):
            break
        piece = body[position : position + size]
        chunks.append(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        position += len(piece)
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    return head + b"".join(chunks) + b"0\r\n\r\n", "".join(texts), len(texts)


@FUZZ
@given(streams(), st.lists(st.integers(min_value=0, max_value=4000), max_size=30))
def test_valid_stream_split_anywhere_succeeds_exactly(stream: Any, cuts: list[int]) -> None:
    data, text, tokens = stream
    timings, received = stream_request(ScriptedConnection(split(data, cuts)), request())
    assert timings.ok, (timings.error_category, timings.error_message)
    assert received == text  # multi-byte characters cut anywhere come out whole
    assert timings.output_tokens == tokens and len(timings.token_stamps) == tokens
    check_invariants(timings)


MUTATIONS = st.sampled_from(["truncate", "insert", "replace", "delete", "timeout", "reset"])


@FUZZ
@given(
    streams(),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=20),
    st.lists(
        st.tuples(MUTATIONS, st.integers(min_value=0, max_value=4000), st.binary(max_size=8)),
        min_size=1,
        max_size=3,
    ),
)
def test_damaged_stream_is_categorised_never_raised(
    stream: Any, cuts: list[int], mutations: list[tuple[str, int, bytes]]
) -> None:
    data, _, _ = stream
    pieces: list[Any] = split(data, cuts)
    for kind, where, junk in mutations:
        flat = b"".join(p for p in pieces if isinstance(p, bytes))
        where = where % (len(flat) + 1)
        if kind == "truncate":
            pieces = [flat[:where]]
        elif kind == "insert":
            pieces = [flat[:where], junk, flat[where:]]
        elif kind == "replace":
            pieces = [flat[:where], junk, flat[where + len(junk) :]]
        elif kind == "delete":
            pieces = [flat[:where], flat[where + 1 + len(junk) :]]
        else:
            pieces = [flat[:where], TIMEOUT if kind == "timeout" else RESET, flat[where:]]
    pieces = [p for p in pieces if p != b""]
    timings, _ = stream_request(ScriptedConnection(pieces), request())
    check_invariants(timings)


@FUZZ
@given(st.binary(max_size=600), st.lists(st.integers(min_value=0, max_value=600), max_size=12))
@example(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: " + b"[" * 100_000, [])
@example(b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\ncontent-type: text/event-stream\r\n\r\n", [])
@example(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n", [])
@example(b"HTTP/1.1 99999 X\r\n\r\n", [])
@example(b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 503 X\r\ncontent-length: 0\r\n\r\n", [])
def test_random_response_bytes_never_raise(data: bytes, cuts: list[int]) -> None:
    timings, _ = stream_request(ScriptedConnection(split(data, cuts)), request())
    check_invariants(timings)
    assert timings.error_category is not None


@FUZZ
@given(st.binary(max_size=400), st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_random_sse_body_never_raises(body: bytes, cuts: list[int]) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
    for api in ("chat", "completions"):
        timings, _ = stream_request(ScriptedConnection(split(head + body, cuts)), request(api))
        check_invariants(timings, api)


# ------------------------------------------------------------------ the parts alone


@FUZZ
@given(st.binary(max_size=500), st.lists(st.integers(min_value=0, max_value=500), max_size=15))
def test_chunked_then_sse_on_random_bytes(data: bytes, cuts: list[int]) -> None:
    decoder, parser = ChunkedDecoder(), SSEParser(max_event_bytes=64)
    try:
        for piece in split(data, cuts):
            parser.feed(decoder.feed(piece))
        parser.close()
    except errors.StreamError as error:
        assert error.category in (errors.BAD_HTTP, errors.TRUNCATED, errors.OVERSIZED_EVENT)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
choice_like = st.fixed_dictionaries(
    {},
    optional={
        "delta": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "content": json_values,
                "role": json_values,
                "reasoning_content": json_values,
                "tool_calls": json_values,
            },
        ),
        "text": json_values,
        "finish_reason": json_values,
    },
)
event_like = st.fixed_dictionaries(
    {},
    optional={
        "choices": json_values | st.lists(choice_like, max_size=2),
        "usage": json_values
        | st.fixed_dictionaries(
            {},
            optional={
                "completion_tokens": json_values | st.integers(),
                "prompt_tokens": json_values,
            },
        ),
        "error": json_values,
    },
)


@FUZZ
@given(
    st.lists(
        event_like.map(lambda e: json.dumps(e).encode())
        | st.binary(max_size=20)
        | st.just(b"[DONE]"),
        max_size=10,
    ),
    st.sampled_from(["chat", "completions"]),
    st.booleans(),
)
@example([b'{"choices":[{"text":5}]}'], "completions", False)
@example([b"[" * 50_000], "chat", False)
@example(
    [
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1}}',
        b'{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}],'
        b'"usage":{"completion_tokens":100000000000}}',
    ],
    "chat",
    False,
)
def test_decoder_on_odd_json_never_raises(payloads: list[bytes], api: str, reset: bool) -> None:
    stamps = list(range(1000, 1000 + len(payloads)))
    decoded = decode_events(stamps, payloads, api, reset)
    assert decoded.error is None or decoded.error.category in CATEGORIES - {errors.CLIENT_ERROR}
    assert isinstance(decoded.text, str)
    assert all(isinstance(k, int) and 1 <= k <= 4096 for k in decoded.token_counts)
    if decoded.error is None:
        assert decoded.finish_reason is not None and decoded.token_stamps
