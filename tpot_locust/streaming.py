"""One streamed request: send, stamp every SSE event on arrival, then decode and classify.

The per-event work while the stream runs is only: parse the event boundary, append the
read's arrival stamp and the raw payload. JSON decoding happens after the stream ended
(``stream_decoder``). No exception leaves ``stream_request``: every failure becomes a
categorised ``RequestTimings`` so a worker keeps running and nothing is silently lost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tpot_locust.errors import (
    CLIENT_ERROR,
    NOT_SSE,
    TIMEOUT_FIRST_TOKEN,
    TIMEOUT_IDLE,
    TIMEOUT_TOTAL,
    StreamError,
    http_status_category,
)
from tpot_locust.http_client import HTTPConnection, ReadTimeout
from tpot_locust.sse import SSEParser
from tpot_locust.stream_decoder import decode_error_body, decode_events
from tpot_locust.timings import RequestTimings

MAX_ERROR_BODY = 64 * 1024


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


class _Collected:
    """Stamps and payloads gathered so far, kept even when the stream fails midway."""

    __slots__ = ("stamps", "payloads", "reset")

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.payloads: list[bytes] = []
        self.reset = False


def stream_request(
    connection: HTTPConnection, request: StreamRequest
) -> tuple[RequestTimings, str]:
    timings = RequestTimings(
        user_class=request.user_class,
        api=request.api,
        request_id=request.request_id,
        t_intended_ns=request.t_intended_ns,
        t_send_ns=time.perf_counter_ns(),
        prompt_tokens_requested=request.prompt_tokens_requested,
    )
    collected = _Collected()
    failure: StreamError | None = None
    try:
        timings.t_send_ns = _send_and_collect(connection, request, collected)
    except StreamError as error:
        connection.close()
        failure = error
    except ReadTimeout:
        connection.close()
        failure = _timeout_error(request, collected, timings.t_send_ns)
    except Exception as error:  # noqa: BLE001 - a user greenlet must never die of a request
        connection.close()
        failure = StreamError(CLIENT_ERROR, f"{error.__class__.__name__}: {error}")
    timings.t_end_ns = time.perf_counter_ns()
    decoded = decode_events(collected.stamps, collected.payloads, request.api, collected.reset)
    timings.token_stamps = decoded.token_stamps
    timings.token_counts = decoded.token_counts
    timings.counts_from_usage = decoded.counts_from_usage
    timings.output_tokens = decoded.output_tokens
    timings.tokens_estimated = decoded.tokens_estimated
    timings.prompt_tokens_reported = decoded.prompt_tokens
    timings.finish_reason = decoded.finish_reason
    failure = failure or decoded.error
    if failure is not None:
        timings.error_category = failure.category
        timings.error_message = failure.message
    return timings, decoded.text


def _send_and_collect(
    connection: HTTPConnection, request: StreamRequest, collected: _Collected
) -> int:
    connection.read_timeout = request.first_token_timeout
    response, t_send_ns = connection.request("POST", request.path, request.headers, request.body)
    deadline_ns = t_send_ns + int(request.total_timeout * 1e9)
    if response.status >= 400:
        body = response.read(deadline_ns)[:MAX_ERROR_BODY]
        raise StreamError(
            http_status_category(response.status),
            f"HTTP {response.status}: {decode_error_body(body)}",
        )
    if "text/event-stream" not in response.content_type:
        response.read(deadline_ns)
        raise StreamError(NOT_SSE, f"content type {response.content_type or 'missing'!r}")
    parser = SSEParser()
    stamps, payloads = collected.stamps, collected.payloads
    for stamp, data in response.iter_body(deadline_ns):
        events = parser.feed(data)
        if events:
            if not payloads:
                connection.read_timeout = request.idle_timeout
            for payload in events:
                stamps.append(stamp)
                payloads.append(payload)
        if stamp >= deadline_ns:
            connection.close()
            raise StreamError(TIMEOUT_TOTAL, f"stream exceeded {request.total_timeout:g} s")
    collected.reset = response.reset
    for payload in parser.close():
        stamps.append(time.perf_counter_ns())
        payloads.append(payload)
    return t_send_ns


def _timeout_error(request: StreamRequest, collected: _Collected, t_send_ns: int) -> StreamError:
    elapsed_s = (time.perf_counter_ns() - t_send_ns) / 1e9
    if elapsed_s >= request.total_timeout * 0.999:
        return StreamError(TIMEOUT_TOTAL, f"stream exceeded {request.total_timeout:g} s")
    if not collected.payloads:
        return StreamError(
            TIMEOUT_FIRST_TOKEN, f"no event within {request.first_token_timeout:g} s"
        )
    return StreamError(TIMEOUT_IDLE, f"no event for {request.idle_timeout:g} s")
