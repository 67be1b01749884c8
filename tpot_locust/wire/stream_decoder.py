"""Turns the stamped events of a stream, in any API's dialect, into token events.

Runs read by read as the stream arrives, after each read was stamped. What one event says
is the dialect's to read (``tpot_locust.apis``); the rules every API shares are here. For
APIs with a ``FastPath`` (the OpenAI ones), plain token chunks (non-empty content,
``"finish_reason":null``, no usage, error, tool call or reasoning field: nearly all events
of a stream) are recognised by a byte scan, and their text is JSON-decoded once per
request; every other event is decoded in full. Once a stream's frame is known, a read that
is exactly one such event skips the SSE parser too (``feed_read``). All paths give
identical timings (tested).
Rules (see docs/metrics.md, "Metric definitions"): a token event carries at least one generated
token (content, reasoning, refusal or tool-call delta; empty strings and role-only,
usage-only or keep-alive events are not);
``k`` tokens per event come from per-chunk usage when every token event carries it, else
from the event's own token ids or logprob entries (or TGI's token object) when every
token event has them, else 1 (``count_source`` says which); the output count ``n`` is the
server's reported completion count, else the sum of k.
"""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field

from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import Dialect, EventReading
from tpot_locust.apis.errors import error_message, raw_error, shared_error
from tpot_locust.common.errors import (
    BAD_JSON,
    CONNECTION_RESET,
    EMPTY_STREAM,
    STREAM_ERROR_EVENT,
    TRUNCATED,
    StreamError,
)
from tpot_locust.common.timings import MAX_KEPT_TEXT, int_array
from tpot_locust.wire.ndjson import NDJSONParser
from tpot_locust.wire.sse import SSEParser

# More tokens than this in one event (from per-chunk usage growth) is not believable: the
# per-chunk counts are then ignored (one token per event), so a lying server cannot make
# the TPOT histogram allocate billions of samples.
MAX_TOKENS_PER_EVENT = 4096
_BACKSLASH = 92
_NOT_IN_TEXT = b'"'  # a quote would end the JSON string: the text is not all of it
NOT_IN_EVENT_TEXT = b'"\r\n'  # nor, in a whole SSE event, a line break
_ONES = array("q", [1]) * 256  # token counts of a run of one-token events


def plain_text_at(payload: bytes, start: int) -> bytes:
    """The raw JSON string body that starts at ``start`` (up to its unescaped quote)."""
    end = payload.find(b'"', start)
    while end > start:
        backslashes = 0
        while payload[end - 1 - backslashes] == _BACKSLASH:
            backslashes += 1
        if backslashes % 2 == 0:
            return payload[start:end]
        end = payload.find(b'"', end + 1)
    return b""


def _loads_lenient(payload: bytes) -> object:
    """The event's JSON; a byte that is not UTF-8 read as U+FFFD, as the fast path (which
    compares bytes) keeps such a token's text: both count it, neither fails the request."""
    try:
        return json.loads(payload)
    except UnicodeDecodeError:  # a ValueError; anything else wrong is the caller's bad_json
        return json.loads(payload.decode("utf-8", "replace"))


def _text_in_frame(data: bytes, head: bytes, tail: bytes, not_in_text: bytes) -> bytes | None:
    """The raw text between a plain token event's ``head`` and ``tail`` (the stream's frame),
    or None: the text must be non-empty, hold none of ``not_in_text`` and not end in a
    backslash (an escape). Deleting those bytes and comparing lengths is one call for all."""
    if not data.startswith(head) or not data.endswith(tail):
        return None
    text = data[len(head) : len(data) - len(tail)]
    if not text or text[-1] == _BACKSLASH or len(text.translate(None, not_in_text)) != len(text):
        return None
    return text


def _joined_text(parts: list[str | bytes]) -> str:
    """Text from decoded strings and raw JSON string bodies (each run decoded at once)."""
    pieces: list[str] = []
    raw: list[bytes] = []
    for part in [*parts, ""]:
        if isinstance(part, bytes):
            raw.append(part)
            continue
        if raw:
            try:
                pieces.append(json.loads(b'"' + b"".join(raw) + b'"'))
            except ValueError:
                pieces.append(b"".join(raw).decode("utf-8", "replace"))
            raw = []
        pieces.append(part)
    text = "".join(pieces)
    if text.isascii():
        return text
    # a surrogate pair split over two events joins here; a lone one (which a tokenizer
    # refuses when the next turn is counted) becomes U+FFFD
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


@dataclass
class DecodedStream:
    token_stamps: array[int] = field(default_factory=int_array)
    token_counts: array[int] = field(default_factory=int_array)
    text_parts: list[str | bytes] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    counts_from_usage: bool = False  # k_i came from the server (any source but "events")
    count_source: str = "events"  # usage | token_ids | logprobs | token | events
    answer_stamp_ns: int | None = None  # the first event that carried answer tokens
    reasoning_tokens: int = 0
    cached_prompt_tokens: int | None = None
    error: StreamError | None = None
    text_cut: bool = False  # the answer's text was kept only up to MAX_KEPT_TEXT

    @property
    def text(self) -> str:
        return _joined_text(self.text_parts)

    @property
    def output_tokens(self) -> int:
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.token_counts)

    @property
    def tokens_estimated(self) -> bool:
        return self.completion_tokens is None


class StreamDecoder:
    """Decodes a stream's events read by read, as they arrive.

    Per read, plain token events cost a byte scan each; anything else is decoded in full.
    Done while the stream runs, this work is spread thin: decoding a whole stream at its
    end blocked the event loop for ~0.5-1 ms per request and delayed other streams' reads.
    After ``[DONE]`` or a failure, later events are ignored. ``fast=False`` decodes every
    event in full (the reference the fast path is tested by).

    Servers send every token of a stream in the same frame (same id, model, fields), so
    the bytes around the text of the last plain event are kept as a *template*: an event
    that is that prefix + a quote-free text + that suffix is the same plain event with
    other text, recognised by two comparisons instead of the scans.
    """

    def __init__(self, api: str | Dialect, fast: bool = True, want_text: bool = True) -> None:
        self.result = DecodedStream()
        self.events = 0  # every data event fed, ignored ones included
        self.stopped = False
        dialect = api if isinstance(api, Dialect) else dialect_named(api)
        self.dialect = dialect.for_stream()
        marks = dialect.fast if fast else None
        self._marker = marks.text_marker if marks is not None else None
        self._plain_mark = marks.plain_mark if marks is not None else b""
        self._not_plain = marks.not_plain if marks is not None else None
        self._done_marker = dialect.done_marker
        self._fast = fast
        self._want_text = want_text
        self._kept = 0  # answer text kept so far (``_keep``)
        self._usage_seen_on_all = True
        self._usage_believable = True
        self._last_usage_count = 0
        self._counted_on_all = True  # every token event said its own count (token ids...)
        self._count_source = "events"
        self._reasoning_reported: int | None = None
        self._prefix: bytes | None = None  # the template: bytes before and after a plain text
        self._suffix = b""
        # the template as one SSE event: ``data: `` + prefix ... suffix + the blank line
        self._event_head: bytes | None = None
        self._event_tail = b""
        self._event_frame: tuple[bytes, bytes] | None = None  # the two, for runs

    def feed(self, stamp: int, payloads: list[bytes]) -> None:
        """The events of one read, all stamped with the read's arrival."""
        self.events += len(payloads)
        if self.stopped:
            return
        result = self.result
        for payload in payloads:
            text = self._framed_text(payload)
            if text is None:
                text = self._scanned_text(payload)
            if text is None:  # anything unusual is decoded in full
                self._decode_in_full(stamp, payload)
                if self.stopped:
                    return
                continue
            result.token_stamps.append(stamp)
            result.token_counts.append(1)
            if result.answer_stamp_ns is None:
                result.answer_stamp_ns = stamp
            if self._want_text:
                result.text_parts.append(text)
                self._keep(len(text))

    def _keep(self, size: int) -> None:
        """``size`` more characters (or bytes) of answer kept: past ``MAX_KEPT_TEXT`` the
        rest is not (a server that ignores ``max_tokens`` sent 200 MB answers, which a
        multi-turn user kept and sent back: 1.6 GB for two users)."""
        self._kept += size
        if self._kept > MAX_KEPT_TEXT:
            self._want_text = False
            self.result.text_cut = True

    def feed_event_bytes(self, stamp: int, data: bytes) -> bool:
        """A read that is exactly one SSE event ``data: <plain token event in the stream's
        frame>`` and its blank line: recorded as ``feed`` would, with comparisons only.

        False (nothing recorded) for anything else: the caller hands the bytes to its SSE
        parser (called only when the parser is ``at_event_start``).
        """
        head = self._event_head
        if head is None or self.stopped:
            return False
        text = _text_in_frame(data, head, self._event_tail, NOT_IN_EVENT_TEXT)
        if text is None:
            return False
        self.events += 1
        result = self.result
        result.token_stamps.append(stamp)
        result.token_counts.append(1)
        if result.answer_stamp_ns is None:
            result.answer_stamp_ns = stamp
        if self._want_text:
            result.text_parts.append(text)
            self._keep(len(text))
        return True

    @property
    def event_frame(self) -> tuple[bytes, bytes] | None:
        """The stream's frame as one SSE event (``data: `` + the bytes before a plain
        text, and those after it + the blank line), once known and while events count;
        the same tuple until it changes."""
        return None if self.stopped else self._event_frame

    def feed_run(self, stamps: list[int], texts: list[bytes]) -> None:
        """Plain token events in the stream's frame (``event_frame``), found whole in one
        read with their texts (``plain_runs``), each with its own stamp: recorded as
        ``feed_event_bytes`` would record them one by one."""
        count = len(texts)
        self.events += count
        result = self.result
        result.token_stamps.extend(stamps)
        result.token_counts.extend(_ONES[:count] if count <= len(_ONES) else [1] * count)
        if result.answer_stamp_ns is None:
            result.answer_stamp_ns = stamps[0]
        if self._want_text:
            result.text_parts.extend(texts)
            self._keep(sum(map(len, texts)))

    def _framed_text(self, payload: bytes) -> bytes | None:
        """The raw text of a plain token event in the stream's frame, else None."""
        prefix = self._prefix
        if prefix is None:
            return None
        return _text_in_frame(payload, prefix, self._suffix, _NOT_IN_TEXT)

    def _scanned_text(self, payload: bytes) -> bytes | None:
        """The raw text of a plain token event found by scanning (one choice: we always
        request n=1), else None; learns the stream's frame from it. The checks run cheapest
        and most selective first."""
        marker = self._marker
        if marker is None or self._not_plain is None:
            return None  # an API without a fast path: every event is decoded in full
        skip = len(marker)
        at = payload.find(marker)
        if not (
            at > 0
            and payload[at + skip : at + skip + 1] not in (b'"', b"")  # non-empty: a token
            and self._plain_mark in payload
            and payload[-1:] == b"}"  # the event is a whole object
            and self._not_plain.search(payload) is None
        ):
            return None
        self._usage_seen_on_all = False  # a plain token event carries no usage
        self._counted_on_all = False  # nor token ids
        text = plain_text_at(payload, at + skip)
        end = at + skip + len(text)
        if self._fast and payload[end : end + 1] == b'"':  # the text's closing quote
            self._prefix, self._suffix = payload[: at + skip], payload[end:]
            self._event_head, self._event_tail = b"data: " + self._prefix, self._suffix + b"\n\n"
            self._event_frame = (self._event_head, self._event_tail)
        return text

    def _decode_in_full(self, stamp: int, payload: bytes) -> None:
        result = self.result
        if self._done_marker is not None and (
            payload == self._done_marker or payload.strip() == self._done_marker
        ):
            result.done = self.stopped = True
            return
        name = None if type(payload) is bytes else getattr(payload, "name", None)
        if name == "error":
            self._fail(StreamError(STREAM_ERROR_EVENT, raw_error(payload)))
            return
        try:
            event = _loads_lenient(payload)
        except (ValueError, RecursionError):
            self._fail(StreamError(BAD_JSON, f"invalid JSON in event: {payload[:80]!r}"))
            return
        if not isinstance(event, dict):
            self._fail(StreamError(BAD_JSON, f"event is not a JSON object: {payload[:80]!r}"))
            return
        if (message := shared_error(event, name)) is not None:
            self._fail(StreamError(STREAM_ERROR_EVENT, message))
            return
        try:
            reading = self.dialect.read(event, name)
        except StreamError as error:  # a count no request can have: the reply is bad
            self._fail(error)
            return
        if reading.error is not None:
            self._fail(StreamError(STREAM_ERROR_EVENT, reading.error))
            return
        self._apply(stamp, reading)

    def _apply(self, stamp: int, reading: EventReading) -> None:
        """The shared rules, applied to what one event said."""
        result = self.result
        usage_count = reading.completion
        if usage_count is not None:
            result.completion_tokens = usage_count
        if reading.prompt is not None:
            result.prompt_tokens = reading.prompt
        if reading.cached is not None:
            result.cached_prompt_tokens = reading.cached
        if reading.reasoning_reported is not None:
            self._reasoning_reported = reading.reasoning_reported
        if reading.tokens:
            tokens = 1
            count = reading.count
            if count is not None and 1 <= count <= MAX_TOKENS_PER_EVENT:
                tokens = count
                self._count_source = reading.count_source or "token_ids"
            else:
                self._counted_on_all = False
            if usage_count is None:
                self._usage_seen_on_all = False
            if self._usage_seen_on_all and usage_count is not None:
                tokens = max(usage_count - self._last_usage_count, 1)
                self._last_usage_count = usage_count
                if tokens > MAX_TOKENS_PER_EVENT:
                    self._usage_believable = False
            result.token_stamps.append(stamp)
            result.token_counts.append(tokens)
            if reading.reasoning:
                result.reasoning_tokens += tokens
            elif result.answer_stamp_ns is None:
                result.answer_stamp_ns = stamp
            if reading.text and self._want_text:
                result.text_parts.append(reading.text)
        if reading.finish_reason is not None:
            result.finish_reason = reading.finish_reason
        if reading.done:
            result.done = self.stopped = True

    def _fail(self, error: StreamError) -> None:
        self.result.error = error
        self.stopped = True

    def finish(self, reset: bool = False) -> DecodedStream:
        """The decoded stream, once it has ended (``reset``: by a connection reset)."""
        result = self.result
        if result.error is not None:
            return result
        if not self._usage_believable:
            self._usage_seen_on_all = self._counted_on_all = False
            result.token_counts = array("q", [1]) * len(result.token_counts)
        if result.token_counts and self._usage_seen_on_all:
            result.count_source = "usage"
        elif result.token_counts and self._counted_on_all:
            result.count_source = self._count_source
        result.counts_from_usage = result.count_source != "events"
        if self._reasoning_reported is not None:
            result.reasoning_tokens = self._reasoning_reported
        if result.finish_reason is None:
            if not self.events and not reset:
                result.error = StreamError(EMPTY_STREAM, "stream ended without any event")
            elif result.done:
                result.error = StreamError(TRUNCATED, "the end marker came without a finish reason")
            elif reset:
                result.error = StreamError(
                    CONNECTION_RESET, "connection reset before finish_reason"
                )
            else:
                result.error = StreamError(TRUNCATED, "stream closed before finish_reason")
        elif not result.token_stamps:
            result.error = StreamError(EMPTY_STREAM, "finished without any token event")
        return result


def decode_events(
    stamps: list[int],
    payloads: list[bytes],
    api: str | Dialect,
    reset: bool = False,
    fast: bool = True,
    want_text: bool = True,
) -> DecodedStream:
    """Decode a whole recorded stream at once (tests, references); a failure is returned
    in ``error``, never raised."""
    decoder = StreamDecoder(api, fast=fast, want_text=want_text)
    for stamp, payload in zip(stamps, payloads, strict=True):
        decoder.feed(stamp, [payload])
    return decoder.finish(reset)


def feed_read(
    parser: SSEParser | NDJSONParser, decoder: StreamDecoder, stamp: int, data: bytes
) -> bool:
    """One read's body bytes into the parser and the decoder; whether it completed an event.

    A read that is one plain token event in the stream's frame (nearly every read of a
    streaming server) skips the parser: one function and a few comparisons, where the
    parser and ``feed`` took three calls and a list (``benchmarks/README.md``)."""
    if parser.at_event_start(len(data)) and decoder.feed_event_bytes(stamp, data):
        return True
    events = parser.feed(data)
    if events:
        decoder.feed(stamp, events)
        return True
    return False


def decode_error_body(body: bytes) -> str:
    """The message of an OpenAI-style error body, or the start of the raw body."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return body[:200].decode("utf-8", "replace")
    if isinstance(parsed, dict) and "error" in parsed:
        return error_message(parsed["error"])
    if isinstance(parsed, dict) and "detail" in parsed:
        return str(parsed["detail"])[:200]
    return body[:200].decode("utf-8", "replace")
