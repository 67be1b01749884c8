"""The fast per-event path gives exactly what decoding every event in full gives."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.wire.chunked import ChunkedDecoder
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import DecodedStream, StreamDecoder, decode_events, feed_read

TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)


def chat_event(kind: str, text: str, tokens: int) -> dict:
    delta: dict = {}
    if kind == "role":
        delta = {"role": "assistant", "content": ""}
    elif kind == "token":
        delta = {"content": text or "x"}
    elif kind == "empty":
        delta = {"content": None}
    elif kind == "reasoning":
        delta = {"reasoning_content": text or "r"}
    elif kind == "tool":
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": '{"content":"x"}'}}]}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
    event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}
    if kind == "usage_token":
        event["choices"][0]["delta"] = {"content": text or "u"}
        event["usage"] = {"prompt_tokens": 3, "completion_tokens": tokens}
    return event


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, str]:
    api = draw(st.sampled_from(["chat", "completions"]))
    kinds = draw(
        st.lists(
            st.sampled_from(
                ["token", "token", "token", "role", "empty", "reasoning", "tool", "usage_token"]
            ),
            max_size=30,
        )
    )
    events: list[dict] = []
    total = 0
    for kind in kinds:
        text = draw(TEXT)
        if api == "completions":
            events.append({"choices": [{"index": 0, "text": text, "finish_reason": None}]})
            continue
        total += draw(st.integers(1, 3)) if kind == "usage_token" else 0
        events.append(chat_event(kind, text, total))
    if draw(st.booleans()):
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    if draw(st.booleans()):
        events.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}})
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    body = b""
    for event in events:
        data = b"data: " + json.dumps(event, separators=separators).encode() + newline * 2
        body += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    if draw(st.booleans()):
        data = b"data: [DONE]" + newline * 2
        body += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    return body + b"0\r\n\r\n", api


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(min_value=0, max_value=4000), max_size=30), st.booleans())
def test_fast_path_equals_full_decoding(
    stream: tuple[bytes, str], cuts: list[int], read_per_chunk: bool
) -> None:
    """``read_per_chunk``: a read ends at every chunk's end, as from a streaming server
    (where ``feed_read`` takes one-event reads without the parser), plus the random cuts."""
    body, api = stream
    if read_per_chunk:
        cuts = cuts + chunk_ends(body)
    chunks, parser, reference_parser = ChunkedDecoder(), SSEParser(), SSEParser()
    stamps: list[int] = []
    payloads: list[bytes] = []
    # the fast path as streaming runs it: each read's bytes as they arrive
    read_by_read = StreamDecoder(api)
    previous = 0
    for stamp, cut in enumerate(sorted({c for c in cuts if c < len(body)}) + [len(body)]):
        data = chunks.feed(body[previous:cut])
        feed_read(parser, read_by_read, stamp, data)
        events = reference_parser.feed(data)
        stamps.extend([stamp] * len(events))
        payloads.extend(events)
        previous = cut
    fast = read_by_read.finish()
    full = decode_events(stamps, payloads, api, fast=False)
    assert fast.token_stamps == full.token_stamps
    assert fast.token_counts == full.token_counts
    assert fast.output_tokens == full.output_tokens
    assert fast.tokens_estimated == full.tokens_estimated
    assert fast.counts_from_usage == full.counts_from_usage
    assert fast.finish_reason == full.finish_reason
    assert (fast.error and fast.error.category) == (full.error and full.error.category)
    assert fast.text == full.text


def test_template_path_leaves_unusual_texts_and_frames_to_full_decoding() -> None:
    """Once a stream's frame is learned, texts with quotes or a final backslash and events
    in another frame (finish, usage, another field) still decode exactly."""

    def frame(content: str, finish: str | None = None, **extra: object) -> bytes:
        choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
        event = {"id": "c1", "object": "chat.completion.chunk", "choices": [choice], **extra}
        return json.dumps(event, separators=(",", ":")).encode()

    payloads = [
        frame("a"),
        frame("b"),
        frame('say "hi"'),
        frame("back\\"),
        frame("\\n"),
        frame("c", logprobs=None),
        frame("d", usage={"completion_tokens": 6}),
        frame("", "stop", usage={"prompt_tokens": 1, "completion_tokens": 7}),
        b"[DONE]",
    ]
    fast, full = decoded_both_ways(payloads)
    assert fast.token_stamps == full.token_stamps
    assert list(fast.token_stamps) == [0, 1, 2, 3, 4, 5, 6]
    assert fast.text == full.text == 'absay "hi"back' + "\\" + "\\n" + "cd"
    assert fast.output_tokens == full.output_tokens == 7
    assert fast.finish_reason == full.finish_reason == "stop"


def decoded_both_ways(payloads: list[bytes]) -> tuple[DecodedStream, DecodedStream]:
    """A chat stream's events, one a read stamped 0, 1, ...: through the fast path as a
    stream feeds it, and decoded in full."""
    stamps = list(range(len(payloads)))
    decoder = StreamDecoder("chat")
    for stamp, payload in zip(stamps, payloads, strict=True):
        decoder.feed(stamp, [payload])
    return decoder.finish(), decode_events(stamps, payloads, "chat", fast=False)


def chunk_ends(body: bytes) -> list[int]:
    """Where each chunk of a chunked body ends: a server's usual read boundaries."""
    ends, position = [], 0
    while (size := int(body[position : body.index(b"\r\n", position)], 16)) > 0:
        position = body.index(b"\r\n", position) + 2 + size + 2
        ends.append(position)
    return ends


def frame_and_split(body: bytes, cuts: list[int]) -> tuple[bytes, list[bytes]]:
    """The chunked body's payload and its events, read in pieces cut at ``cuts``."""
    decoder, parser = ChunkedDecoder(), SSEParser()
    payload, events = b"", []
    previous = 0
    for cut in sorted({c for c in cuts if 0 < c < len(body)}) + [len(body)]:
        piece = decoder.feed(body[previous:cut])
        payload += piece
        events += parser.feed(piece)
        previous = cut
    assert decoder.done
    return payload, events + parser.close()


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(min_value=0, max_value=4000), max_size=6))
def test_one_read_per_chunk_frames_like_any_split(
    stream: tuple[bytes, str], cuts: list[int]
) -> None:
    """Reads of exactly one chunk each (the one-event fast paths of both parsers) and
    reads cut anywhere give the payload and events of the whole body read at once."""
    body, _ = stream
    whole = frame_and_split(body, [])
    assert frame_and_split(body, chunk_ends(body)) == whole
    assert frame_and_split(body, chunk_ends(body) + cuts) == whole


def test_one_event_reads_skip_the_parser_only_where_it_would_agree() -> None:
    """``feed_read`` takes a read that is one plain event in the stream's frame without the
    SSE parser; a read after a partial event, a text with a quote (another field follows)
    and two events in one read still go through the parser and decode exactly."""

    def event(content: str, **extra: object) -> bytes:
        delta = {"content": content, **extra}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        data = {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    parser, decoder = SSEParser(), StreamDecoder("chat")
    assert feed_read(parser, decoder, 1, event("a"))  # learns the frame
    assert feed_read(parser, decoder, 2, event("b"))
    assert feed_read(parser, decoder, 3, event("c", extra="d"))  # a quote in the middle
    assert feed_read(parser, decoder, 4, event("e") + event("f"))
    assert decoder.result.text == "abcef"
    assert list(decoder.result.token_stamps) == [1, 2, 3, 4, 4]
    # the parser holds half an event: the next read completes it, whatever it looks like
    assert not feed_read(parser, decoder, 5, event("g")[:20])
    assert parser.pending
    assert feed_read(parser, decoder, 6, event("h"))
    assert not parser.pending


def test_an_answer_kept_for_the_next_turn_stops_at_its_limit_on_every_path() -> None:
    """Issue 57, item 4: a server that ignores max_tokens sent 200 MB answers, which a
    multi-turn user kept whole (1.6 GB for two users). Past ``MAX_KEPT_TEXT`` no more of
    the answer is kept, on the fast path, a run of events and the parser's path alike;
    every event still counts as a token."""
    from tpot_locust.common.timings import MAX_KEPT_TEXT

    def event(content: str) -> bytes:
        choice = {"index": 0, "delta": {"content": content}, "finish_reason": None}
        return (
            b"data: " + json.dumps({"choices": [choice]}, separators=(",", ":")).encode() + b"\n\n"
        )

    text = "x" * 4096
    events = MAX_KEPT_TEXT // len(text) + 50
    parser, decoder, fed = SSEParser(), StreamDecoder("chat"), 0
    for stamp in range(events // 2):
        assert feed_read(parser, decoder, stamp, event(text))  # one event a read
        fed += 1
    for stamp in range(events // 2, events, 2):
        assert feed_read(parser, decoder, stamp, event(text) + event(text))  # the parser
        fed += 2
    decoder.feed_run([events, events + 1], [text.encode(), text.encode()])  # a run
    assert len(decoder.result.token_stamps) == fed + 2
    assert decoder.result.text_cut and MAX_KEPT_TEXT < len(
        decoder.result.text
    ) <= MAX_KEPT_TEXT + 2 * len(text)
    whole = StreamDecoder("chat", want_text=False)
    assert not whole.result.text_cut


def test_a_token_with_invalid_utf8_counts_the_same_on_both_paths() -> None:
    """A server that sends a byte JSON may not hold (invalid UTF-8, here ``\\xff``) in a
    token's text: the fast path (comparisons on bytes) counted the token, the full decoder
    failed the request as ``bad_json``. Both count it now, its text with U+FFFD."""

    def frame(content: bytes) -> bytes:
        head = b'{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
        return head + b'{"content":"' + content + b'"},"finish_reason":null}]}'

    finish = frame(b"").replace(b'{"content":""}', b"{}").replace(b"null", b'"stop"')
    payloads = [frame(b"a"), frame(b"b\xff"), frame(b"c"), finish, b"[DONE]"]
    fast, full = decoded_both_ways(payloads)
    assert fast.error is None and full.error is None
    assert list(fast.token_stamps) == list(full.token_stamps) == [0, 1, 2]
    assert fast.text == full.text == "ab\ufffdc"
