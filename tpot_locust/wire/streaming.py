"""One streamed request: send, stamp every read on arrival, split and classify its events.

The work per read while the stream runs (done by the event loop's callback on the ready
socket, ``loop_reads``) is: find the event boundaries, hand the events and the read's
arrival stamp to ``stream_decoder`` (a read of one plain token event in the stream's frame:
a few comparisons; a read of several such events whole: one pass, ``plain_runs``; else a
byte scan per plain token event, JSON only for unusual ones), move the request's deadline.
No exception leaves
``stream_request``: every failure becomes a categorised ``RequestTimings`` so a worker
keeps running and nothing is silently lost.

Timeouts are deadlines on *events*, not bytes: the first event must come within
``first_token_timeout`` of the send, each later one within ``idle_timeout`` of the previous,
and the whole stream within ``total_timeout`` (one ``Deadline`` per request keeps all three);
SSE comments (keep-alives) reset nothing.
Error messages never show the request's credentials, even when a server echoes them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tpot_locust.apis.dialect import Dialect
from tpot_locust.common import secrets
from tpot_locust.common.clock import SEGMENT_CLOCK, stamp_ns
from tpot_locust.common.errors import (
    BAD_JSON,
    CLIENT_ERROR,
    EMPTY_STREAM,
    NOT_SSE,
    STREAM_ERROR_EVENT,
    TIMEOUT_FIRST_TOKEN,
    TIMEOUT_IDLE,
    TIMEOUT_TOTAL,
    StreamError,
    http_status_category,
)
from tpot_locust.common.metric_groups import metric_group
from tpot_locust.common.text_safety import printable
from tpot_locust.common.timings import BODY_END_GRACE_S, RequestTimings, StreamSoFar
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.http_client import HTTPConnection, ReadTimeout
from tpot_locust.wire.http_response import Response
from tpot_locust.wire.loop_reads import read_body
from tpot_locust.wire.ndjson import NDJSONParser
from tpot_locust.wire.plain_runs import PlainRuns
from tpot_locust.wire.sse import DEFAULT_MAX_EVENT_BYTES, SSEParser
from tpot_locust.wire.stream_decoder import (
    DecodedStream,
    StreamDecoder,
    decode_error_body,
    feed_read,
)

MAX_ERROR_BODY = 64 * 1024
BODY_START_KEPT = 256  # bytes of a body kept until its first event: what arrived instead


class LiveStreams(Protocol):
    """Who follows a stream while it goes (``metrics.token_flow.TokenFlow``: its tokens for
    tokens/s, its gaps for each interval's report): told of each stream at its start, with
    its request id and figures' key (``common.metric_groups``), and at its end."""

    def start(self, request_id: str, group: str, stream: StreamSoFar) -> None: ...

    def end(self, request_id: str) -> None: ...


@dataclass(frozen=True)
class StreamRequest:
    user_class: str
    api: str
    request_id: str
    path: str
    headers: dict[str, str]
    body: bytes
    prompt_tokens_requested: int
    first_token_timeout: float
    idle_timeout: float
    total_timeout: float
    t_intended_ns: int
    # called once, with the first token event's stamp, while the stream goes on: its
    # prefill is over (``metrics.causes``); must neither block nor yield
    on_first_token: Callable[[int], None] | None = None
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES  # a longer event fails the request
    live: LiveStreams | None = None  # follows the stream while it goes, if given
    model: str | None = None  # the model its class chose (``common.metric_groups``)
    # called, when the stream is cut by what no request catches (the stop killing its
    # user: ``GreenletExit``), with what came before it (the send, the token events so
    # far, no error yet), before that propagates; must neither block nor yield
    on_cut: Callable[[RequestTimings], None] | None = None


class _Collected:
    """The stream decoded so far, kept even when the stream fails midway: also what its
    live counter reads while it goes (``StreamSoFar``)."""

    __slots__ = (
        "body_start",
        "connection",
        "content_type",
        "deadline",
        "decoder",
        "read_in_batches",
        "reset",
        "t_send_ns",
    )

    def __init__(
        self, t_send_ns: int, decoder: StreamDecoder, deadline: Deadline, connection: HTTPConnection
    ) -> None:
        self.deadline = deadline  # arrived(): the last read that held an event
        self.decoder = decoder
        self.connection = connection
        self.reset = False
        self.read_in_batches = False  # the body was read in batches (``loop_reads``)
        self.t_send_ns = t_send_ns
        self.body_start = b""  # the body's first bytes while no event came: what came instead
        self.content_type = ""

    @property
    def token_stamps(self) -> array[int]:
        return self.decoder.result.token_stamps

    @property
    def token_counts(self) -> array[int]:
        return self.decoder.result.token_counts

    @property
    def answer_stamp_ns(self) -> int | None:
        return self.decoder.result.answer_stamp_ns

    def stamps_recovered(self) -> bool:
        return self.connection.request_clock == SEGMENT_CLOCK

    def retransmitted(self) -> bool:
        return self.connection.retransmits_since_send() > 0


def stream_request(
    connection: HTTPConnection, request: StreamRequest, want_text: bool = True
) -> tuple[RequestTimings, str]:
    """Send, collect, decode; ``want_text=False`` skips rebuilding the answer's text."""
    timings = _new_timings(request)
    deadline = Deadline(request.first_token_timeout, request.idle_timeout, request.total_timeout)
    decoder = StreamDecoder(request.api, want_text=want_text)
    collected = _Collected(timings.t_send_ns, decoder, deadline, connection)
    live = request.live
    if live is not None:
        live.start(request.request_id, metric_group(request.user_class, request.model), collected)
    try:
        return _stream(connection, request, timings, collected)
    except BaseException:  # the stop killed the user mid-stream: what came is still kept
        if request.on_cut is not None:
            request.on_cut(_cut(timings, collected))
        raise
    finally:
        if live is not None:
            live.end(request.request_id)


def _cut(timings: RequestTimings, collected: _Collected) -> RequestTimings:
    """``timings`` of a stream cut where it stood: its send and its token events so far."""
    timings.t_send_ns = collected.t_send_ns
    timings.t_end_ns = stamp_ns()
    timings.token_stamps = collected.token_stamps
    timings.token_counts = collected.token_counts
    timings.output_tokens = sum(collected.token_counts)
    timings.answer_stamp_ns = collected.decoder.result.answer_stamp_ns
    timings.reasoning_tokens = collected.decoder.result.reasoning_tokens
    timings.arrival_clock = collected.connection.request_clock
    return timings


def _stream(
    connection: HTTPConnection,
    request: StreamRequest,
    timings: RequestTimings,
    collected: _Collected,
) -> tuple[RequestTimings, str]:
    failure: StreamError | None = None
    try:
        _send_and_collect(connection, request, collected)
    except Exception as error:  # noqa: BLE001 - a user greenlet must never die of a request
        connection.close()
        if collected.decoder.result.done:
            # [DONE] (or the API's final event) had come: the stream is complete, whatever
            # the body did after it (kept open, endless trailers, a chunk that never ends)
            timings.body_after_end = True
        elif isinstance(error, StreamError):
            failure = error
        elif isinstance(error, ReadTimeout):
            failure = _timeout_error(request, collected)
        else:
            failure = StreamError(CLIENT_ERROR, f"{error.__class__.__name__}: {error}")
    timings.t_send_ns = collected.t_send_ns
    timings.t_end_ns = stamp_ns()
    timings.read_delays_ns = connection.read_delays_ns
    timings.arrival_clock = connection.request_clock
    timings.departed = connection.request_departed
    timings.read_in_batches = collected.read_in_batches
    timings.retransmits = connection.retransmits_since_send()
    # No yield from here until the caller has recorded the request: a stopping user is
    # killed at its next yield, and a stream the server finished would count as interrupted.
    try:
        decoded = collected.decoder.finish(collected.reset)
    except Exception as error:  # noqa: BLE001 - never expected; still counted, never raised
        decoded = DecodedStream(error=StreamError(CLIENT_ERROR, f"decoding: {error!r}"))
    timings.token_stamps = decoded.token_stamps
    timings.token_counts = decoded.token_counts
    timings.counts_from_usage = decoded.counts_from_usage
    timings.count_source = decoded.count_source
    timings.answer_stamp_ns = decoded.answer_stamp_ns
    timings.reasoning_tokens = decoded.reasoning_tokens
    timings.cached_prompt_tokens = decoded.cached_prompt_tokens
    timings.output_tokens = decoded.output_tokens
    timings.tokens_estimated = decoded.tokens_estimated
    timings.prompt_tokens_reported = decoded.prompt_tokens
    timings.finish_reason = decoded.finish_reason
    failure = _first_cause(failure, _described_empty(decoded.error, collected))
    if failure is not None:
        timings.error_category = failure.category
        timings.error_message = redact(failure.message, request.headers)
    timings.refuse_out_of_range()
    return timings, decoded.text


def redact(message: str, headers: dict[str, str]) -> str:
    """The message without any credential sent in ``headers`` (servers do echo keys): the
    value of every header whose name says it is a secret (``common.secrets``); and
    printable, a server's escape sequences shown, never sent to a terminal."""
    return printable(secrets.redact_text(message, secrets.header_secrets(headers)))


def _new_timings(request: StreamRequest) -> RequestTimings:
    return RequestTimings(
        user_class=request.user_class,
        api=request.api,
        request_id=request.request_id,
        t_intended_ns=request.t_intended_ns,
        t_send_ns=stamp_ns(),
        prompt_tokens_requested=request.prompt_tokens_requested,
        model=request.model,
    )


def _first_cause(transport: StreamError | None, content: StreamError | None) -> StreamError | None:
    """An error event or bad JSON that arrived before the transport failed is the cause."""
    if content is not None and content.category in (STREAM_ERROR_EVENT, BAD_JSON):
        return content
    return transport or content


def _send_and_collect(
    connection: HTTPConnection, request: StreamRequest, collected: _Collected
) -> None:
    deadline = collected.deadline
    response, collected.t_send_ns = connection.request(
        "POST", request.path, request.headers, request.body, deadline
    )
    if response.status >= 400:
        raise _http_error(response)
    media_types = collected.decoder.dialect.media_types
    if (not_stream := _not_a_stream(response, media_types)) is not None:
        try:
            response.read(limit=MAX_ERROR_BODY)
        except (StreamError, ReadTimeout):
            pass
        raise not_stream
    collected.content_type = response.content_type
    decoder = collected.decoder
    parser = event_parser(decoder.dialect, request.max_event_bytes)
    first_token = request.on_first_token
    ending = False

    def consume(stamp: int, data: bytes) -> None:
        nonlocal first_token, ending
        if not decoder.events and len(collected.body_start) < BODY_START_KEPT:
            collected.body_start += data[:BODY_START_KEPT]
        if feed_read(parser, decoder, stamp, data):
            deadline.arrived(stamp)
            if first_token is not None and decoder.result.token_stamps:
                first_token(decoder.result.token_stamps[0])
                first_token = None
            if parser.failure is not None:  # an oversized event came after these
                raise parser.failure
            if decoder.result.done and not ending:  # [DONE], or the API's final event
                deadline.ending(stamp, BODY_END_GRACE_S)
                ending = True
        if stamp >= deadline.end_ns:
            raise StreamError(TIMEOUT_TOTAL, f"stream exceeded {request.total_timeout:g} s")

    runs = None
    if isinstance(parser, SSEParser):
        runs = PlainRuns(response, parser, decoder, deadline, request.total_timeout)
    collected.read_in_batches = read_body(response, consume, runs)
    collected.reset = response.reset
    if events := parser.close():
        decoder.feed(stamp_ns(), events)


def event_parser(dialect: Dialect, max_event_bytes: int) -> SSEParser | NDJSONParser:
    """The parser of the API's framing: SSE, or NDJSON (one JSON object a line)."""
    if dialect.framing == "ndjson":
        return NDJSONParser(max_event_bytes)
    return SSEParser(max_event_bytes)


def _not_a_stream(
    response: Response, media_types: tuple[str, ...] = ("text/event-stream",)
) -> StreamError | None:
    """Why a response below 400 is no event stream we can read, or None: a redirect (not
    followed: a load test measures the server it was given), a compression we do not
    decode (we ask for none; gzip and deflate are decoded, ``http_client``) or a media
    type not in ``media_types`` (compared case-insensitively, parameters ignored)."""
    status, headers = response.status, response.headers
    if 300 <= status < 400:
        location = secrets.redact_url(headers.get("location", ""))[:200] or "nowhere"
        return StreamError(NOT_SSE, f"redirect (HTTP {status} to {location}), not followed")
    encoding = headers.get("content-encoding", "").strip()
    if encoding and encoding.lower() != "identity" and not response.inflating:
        return StreamError(
            NOT_SSE, f"HTTP {status} with Content-Encoding: {encoding[:40]}, not an event stream"
        )
    content_type = response.content_type
    if content_type.split(";", 1)[0].strip().lower() not in media_types:
        shown = f"a {content_type[:60]} body" if content_type else "no content type"
        return StreamError(NOT_SSE, f"HTTP {status} with {shown}, not an event stream")
    return None


def _described_empty(error: StreamError | None, collected: _Collected) -> StreamError | None:
    """A stream that ended without any event, told by what came instead: an HTML page or a
    compressed body served as an event stream is ``not_sse``, with its first bytes."""
    start = collected.body_start.lstrip()
    if error is None or error.category != EMPTY_STREAM or collected.decoder.events or not start:
        return error
    if start[:2] == b"\x1f\x8b":
        what = "a gzip-compressed body"
    elif start[:1] == b"<":
        page = start[:5].lower() in (b"<!doc", b"<html")
        what = "an HTML page" if page else "a markup (HTML or XML) body"
    else:
        return StreamError(EMPTY_STREAM, f"{error.message}; the body began {start[:80]!r}")
    shown = collected.content_type[:60] or "no content type"
    return StreamError(NOT_SSE, f"{what} ({shown}), not an event stream: {start[:80]!r}")


def _http_error(response: Response) -> StreamError:
    """The categorised failure of an HTTP error status, with the server's message."""
    try:
        body = response.read(limit=MAX_ERROR_BODY)
    except (StreamError, ReadTimeout):
        body = b""  # the status alone is the failure
    retry_after = response.headers.get("retry-after")
    detail = f" (Retry-After: {retry_after[:40]})" if retry_after else ""
    return StreamError(
        http_status_category(response.status),
        f"HTTP {response.status}{detail}: {decode_error_body(body)}",
    )


def _timeout_error(request: StreamRequest, collected: _Collected) -> StreamError:
    missed = collected.deadline.missed
    if missed == "total":
        return StreamError(TIMEOUT_TOTAL, f"stream exceeded {request.total_timeout:g} s")
    if missed == "first":
        return StreamError(
            TIMEOUT_FIRST_TOKEN, f"no event within {request.first_token_timeout:g} s"
        )
    return StreamError(TIMEOUT_IDLE, f"no event for {request.idle_timeout:g} s")
