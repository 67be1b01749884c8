"""The client stamps each event on arrival and reports truncation, resets and timeouts."""

from __future__ import annotations

import gc
import json
import time

import numpy as np
import pytest

from tests.helpers.scripted_server import (
    DONE,
    FINISH,
    Script,
    chunk,
    request,
    scripted_server,
    sse_head,
    token,
)
from tpot_locust.common.errors import (
    BAD_HTTP,
    BAD_JSON,
    CONNECTION_RESET,
    HTTP_5XX,
    HTTP_429,
    NOT_SSE,
    STREAM_ERROR_EVENT,
    TIMEOUT_FIRST_TOKEN,
    TIMEOUT_IDLE,
    TRUNCATED,
)
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import stream_request


def usage(tokens: int) -> bytes:
    body = b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d}}' % tokens
    return chunk(b"data: " + body + b"\n\n")


def run(scripts: list[Script], **overrides: float):
    with scripted_server(scripts) as url:
        connection = HTTPConnection(Origin.parse(url))
        results = [stream_request(connection, request(**overrides)) for _ in scripts]
        connection.close()
    return [timings for timings, _ in results]


def test_events_one_ms_apart_are_stamped_individually() -> None:
    steps = [(0.0, sse_head())] + [(0.01 + i * 0.001, token(" w")) for i in range(100)]
    steps.append((0.12, FINISH + usage(100) + DONE))
    script = Script(steps)
    (timings,) = run([script])
    assert timings.ok, timings.error_message
    assert timings.output_tokens == 100 and not timings.tokens_estimated
    gaps_ms = np.diff(timings.token_stamps) / 1e6
    truth_ms = np.diff(script.write_ns[1:101]) / 1e6
    # not batched together (a reader that waits for n bytes merged 77 % of such gaps). When
    # Locust's monkey-patching (another test module) turns the server thread into a greenlet
    # of this process, its writes can bunch up too: count only gaps the client merged.
    merged_by_client = np.count_nonzero((gaps_ms < 0.3) & (truth_ms >= 0.5))
    assert merged_by_client <= 10, (gaps_ms, truth_ms)
    assert abs(np.median(gaps_ms) - np.median(truth_ms)) < 0.2
    # Per-event values are kept where Python's cycle collector does not walk them one by
    # one (lists of stamps held until the next report made collections pause 2-8 ms).
    for values in (timings.token_stamps, timings.token_counts, timings.read_delays_ns):
        assert len(values) > 1 and len(gc.get_referents(values)) <= 1


def test_close_mid_stream_is_truncated_not_success() -> None:
    steps = [(0.0, sse_head() + token(" a") + token(" b"))]
    (timings,) = run([Script(steps)])
    assert not timings.ok
    assert timings.error_category == TRUNCATED
    assert len(timings.token_stamps) == 2  # the partial tokens are still known


def test_reset_mid_stream_is_connection_reset() -> None:
    (timings,) = run([Script([(0.0, sse_head() + token(" a"))], reset=True)])
    assert timings.error_category == CONNECTION_RESET


def test_close_after_finish_reason_without_done_is_success() -> None:
    # transformers serve sends no [DONE]; a clean close after finish_reason is complete.
    steps = [
        (
            0.0,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n'
            b'data: {"choices":[{"delta":{"content":"y"},"finish_reason":"length"}],'
            b'"usage":{"completion_tokens":2,"prompt_tokens":1}}\n\n',
        )
    ]
    (timings,) = run([Script(steps)])
    assert timings.ok, timings.error_message
    assert timings.output_tokens == 2


@pytest.mark.parametrize(
    ("payload", "category"),
    [
        (b'data: {"error": {"message": "overloaded", "code": 503}}\n\n', STREAM_ERROR_EVENT),
        (b"data: {not json\n\n", BAD_JSON),
    ],
)
def test_bad_events_mid_stream(payload: bytes, category: str) -> None:
    steps = [(0.0, sse_head() + token(" a") + chunk(payload) + DONE)]
    (timings,) = run([Script(steps)])
    assert timings.error_category == category


@pytest.mark.parametrize(("status", "category"), [(429, HTTP_429), (503, HTTP_5XX)])
def test_http_errors_before_the_stream(status: int, category: str) -> None:
    body = b'{"error": {"message": "slow down"}}'
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    (timings,) = run([Script([(0.0, head.encode() + body)])])
    assert timings.error_category == category
    assert "slow down" in timings.error_message


def test_a_bad_content_length_is_bad_http_but_an_error_status_keeps_its_category() -> None:
    bad_length = b"Content-Length: lots\r\n\r\n"
    error = b"HTTP/1.1 429 Too Many Requests\r\n" + bad_length
    stream = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + bad_length
    timings = run([Script([(0.0, error)]), Script([(0.0, stream + token(" a"))])])
    assert [t.error_category for t in timings] == [HTTP_429, BAD_HTTP]


def test_not_sse_content_type() -> None:
    body = b'{"choices": []}'
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    (timings,) = run([Script([(0.0, head.encode() + b"\r\n\r\n" + body)])])
    assert timings.error_category == NOT_SSE


def test_timeouts_first_token_and_idle() -> None:
    first = Script([(0.0, sse_head()), (2.0, token(" late"))])
    idle = Script([(0.0, sse_head() + token(" a")), (2.0, token(" late"))])
    timings = run([first, idle], first_token_timeout=0.3, idle_timeout=0.3)
    assert [t.error_category for t in timings] == [TIMEOUT_FIRST_TOKEN, TIMEOUT_IDLE]


def test_multi_token_chunks_from_per_chunk_usage() -> None:
    def event(text: str, total: int) -> bytes:
        body = {
            "choices": [{"delta": {"content": text}, "finish_reason": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": total},
        }
        return chunk(b"data: " + json.dumps(body).encode() + b"\n\n")

    steps = [
        (0.0, sse_head() + event("a", 1)),
        (0.02, event("bcd", 4)),
        (0.04, event("ef", 6) + FINISH + usage(6) + DONE),
    ]
    (timings,) = run([Script(steps)])
    assert timings.ok and timings.counts_from_usage
    assert list(timings.token_counts) == [1, 3, 2]
    tpot = timings.tpot_ns()
    assert tpot.size == 5  # one sample per token after the first
    assert timings.decode_tokens == 5


@pytest.mark.parametrize(
    "after",
    [
        pytest.param([], id="kept-open"),
        pytest.param(
            [(0.05, b"0\r\n")] + [(0.1 + i * 0.05, b"X-Trailer: more\r\n") for i in range(100)],
            id="trailers",
        ),
        pytest.param(
            [(0.1, b"ffffffffffffffff\r\n")] + [(0.15 + i * 0.05, b"z" * 64) for i in range(100)],
            id="endless-chunk",
        ),
    ],
)
def test_the_end_of_a_stream_is_its_done_whatever_the_body_does_after(
    after: list[tuple[float, bytes]],
) -> None:
    """Issue 57, item 5: ``[DONE]`` came but the chunked body never ended (kept open, endless
    trailers, a 2^64-byte chunk): the request is complete at once, not after its idle
    timeout (60 s by default, which held each user's next request); its connection closed."""
    done_without_end = chunk(b"data: [DONE]\n\n")
    steps = [(0.0, sse_head() + token(" a") + token(" b") + FINISH + done_without_end)]
    steps += after
    started = time.perf_counter()
    (timings,) = run([Script([*steps], keep_open_s=6.0)], idle_timeout=5.0)
    assert timings.ok, timings.error_message
    assert timings.output_tokens == 2 and timings.body_after_end
    assert time.perf_counter() - started < 4.0  # the 1 s grace, not the 5 s idle timeout


def test_a_body_that_ends_after_its_done_is_not_marked() -> None:
    steps = [(0.0, sse_head() + token(" a") + FINISH + DONE)]
    (timings,) = run([Script(steps)])
    assert timings.ok and not timings.body_after_end
