"""Hostile server replies (issue 25): each is one request's categorised failure with a clear
message, never an exception later, and no credential the request carried is shown.

Items: 4 (numbers from server JSON), 15 (secrets: names, URLs, documents, echoed headers),
16 (Unicode Content-Length, redirects, compressed or HTML bodies, the simulator's deeply
nested JSON), 9 (the model lookup's answer).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.hostile_stream_server import HUGE, HostileStreamServer, stream_events
from tests.unit.test_fuzz import ScriptedConnection, check_invariants
from tpot_locust.common import errors
from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.secrets import (
    REDACTED,
    is_secret_name,
    redact_mapping,
    redact_text,
    redact_url,
)
from tpot_locust.common.timings import MAX_TOKEN_COUNT, RequestTimings
from tpot_locust.harness.users.model_lookup import first_model_id
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.sim.request import RequestError, parse_request
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.stream_decoder import decode_events
from tpot_locust.wire.streaming import StreamRequest, redact, stream_request

SECRETS = {
    "X-Goog-Api-Key": "AIzaSyPLANTED0123456789",
    "Ocp-Apim-Subscription-Key": "ocp-planted-0123456789",
    "X-Custom-Creds": "creds-planted-0123456789",
    "Authorization": "Bearer sk-planted-0123456789",
}


def request(headers: dict[str, str] | None = None) -> StreamRequest:
    return StreamRequest(
        user_class="Fuzz",
        api="chat",
        request_id="h",
        path="/v1/chat/completions",
        headers={"Content-Type": "application/json", **(headers or {})},
        body=b"{}",
        prompt_tokens_requested=5,
        first_token_timeout=5.0,
        idle_timeout=5.0,
        total_timeout=30.0,
        t_intended_ns=stamp_ns(),
    )


def served(reply: str, headers: dict[str, str] | None = None) -> RequestTimings:
    """One request to the hostile server, answered with ``reply``."""
    with HostileStreamServer((reply,)) as server:
        connection = HTTPConnection(Origin.parse(server.url))
        timings, _ = stream_request(connection, request(headers))
        connection.close()
    check_invariants(timings)  # one of our categories, never client_error; recordable
    return timings


def sse_stream(events: list[bytes]) -> bytes:
    body = b"".join(events)
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


# ---------------------------------------------------------------- item 4: server numbers


@pytest.mark.parametrize(
    "count",
    [HUGE, -HUGE, -1, MAX_TOKEN_COUNT + 1, 2**63, True, 3.5, float("nan"), "12", [1], {}],
    ids=[
        "400-digits",
        "-400-digits",
        "-1",
        "1e9+1",
        "2^63",
        "true",
        "3.5",
        "nan",
        "text",
        "array",
        "object",
    ],
)
def test_a_usage_count_no_request_can_have_fails_that_request_as_bad_json(count: object) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": count}
    payloads = [
        json.dumps({"choices": [{"delta": {"content": " a"}, "finish_reason": None}]}),
        json.dumps({"choices": [{"delta": {}, "finish_reason": "length"}]}),
        json.dumps({"choices": [], "usage": usage}),
        "[DONE]",
    ]
    decoded = decode_events([1, 2, 3, 4], [p.encode() for p in payloads], "chat")
    assert decoded.error is not None and decoded.error.category == errors.BAD_JSON
    assert "usage.completion_tokens is not a token count" in decoded.error.message
    assert len(decoded.error.message) < 200  # a description, never the 400 digits


@pytest.mark.parametrize("usage", [None, {"completion_tokens": None}, {}])
def test_absent_or_null_usage_is_no_error(usage: object) -> None:
    payloads = [
        json.dumps({"choices": [{"delta": {"content": " a"}, "finish_reason": None}]}),
        json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": usage}),
        "[DONE]",
    ]
    decoded = decode_events([1, 2, 3], [p.encode() for p in payloads], "chat")
    assert decoded.error is None and decoded.output_tokens == 1


def test_a_400_digit_completion_count_is_one_failed_request_and_the_rest_recorded() -> None:
    good = sse_stream(stream_events(4, 4))
    huge = sse_stream(stream_events(4, HUGE))
    recorder = Recorder()
    results = []
    for stream in (good, huge, good):
        timings, _ = stream_request(ScriptedConnection([stream]), request())
        recorder.record(timings)
        results.append(timings)
    assert [t.error_category for t in results] == [None, errors.BAD_JSON, None]
    assert "integer of about 400 digits" in results[1].error_message
    counters = recorder.take_interval().groups["Fuzz"].counters  # the stop: no OverflowError
    assert counters.ok == 2 and counters.failed == 1 and counters.output_tokens == 8


def test_out_of_range_timings_are_refused_before_numpy() -> None:
    timings = RequestTimings("Fuzz", "chat", "r", 1, 2, output_tokens=HUGE, t_end_ns=3)
    assert timings.refuse_out_of_range()
    assert timings.error_category == errors.CLIENT_ERROR and timings.output_tokens == 0
    assert "output_tokens out of range" in (timings.error_message or "")
    fine = RequestTimings("Fuzz", "chat", "r", 1, 2, output_tokens=10, t_end_ns=3)
    assert not fine.refuse_out_of_range() and fine.ok


# ---------------------------------------------------------------- item 15: secrets


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "X-Goog-Api-Key",
        "Ocp-Apim-Subscription-Key",
        "X-Custom-Creds",
        "api_key",
        "apiKey",
        "X-Auth-Token",
        "Cookie",
        "X-Amz-Signature",
        "client_secret",
        "password",
        "passwd",
        "session",
        "credential",
        "bearer",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max_tokens",
        "prompt_tokens",
        "output_tokens",
        "tokenizer",
        "api_key_env",
        "first_token",
        "min_tokens",
        "followup_tokens",
        "shared_prefix_tokens",
        "Content-Type",
        "X-Request-Id",
        "model",
        "host",
        "keepalive",
    ],
)
def test_names_of_the_scenario_schema_are_no_secrets(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:secret@host:8000/v1", f"http://user:{REDACTED}@host:8000/v1"),
        ("https://sk-token@host", f"https://{REDACTED}@host"),
        ("http://host/v1?api_key=abc&x=1", f"http://host/v1?api_key={REDACTED}&x=1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://u:p@[::1", f"http://u:{REDACTED}@[::1"),  # unparsable: by pattern
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_mapping_takes_a_secret_block_whole_and_keeps_the_schema() -> None:
    scenario = {
        "server": {
            "host": "http://u:pw-planted@h:1",
            "api_key_env": "MY_KEY",
            "headers": {"X-Custom-Creds": "planted", "Accept": "text/event-stream"},
            "auth": {"bearer": "planted"},
            "timeouts": {"first_token": 5},
        },
        "classes": {
            "chat": {
                "max_tokens": 8,
                "prompt_tokens": 16,
                "tokenizer": "gpt2",
                "extra_body": {"note": "Bearer sk-planted-0123456789"},
            }
        },
    }
    redacted = redact_mapping(scenario)
    assert "planted" not in json.dumps(redacted)
    assert redacted["server"]["auth"] == REDACTED
    assert redacted["server"]["host"] == f"http://u:{REDACTED}@h:1"
    assert redacted["server"]["api_key_env"] == "MY_KEY"
    assert redacted["server"]["timeouts"] == {"first_token": 5}
    assert redacted["classes"]["chat"]["max_tokens"] == 8
    assert redacted["server"]["headers"]["Accept"] == "text/event-stream"


def test_redact_text() -> None:
    text = "got key abc-planted-1234 from http://u:pw@h/x; Bearer authentication required"
    shown = redact_text(text, ["abc-planted-1234", "ab"])
    assert shown == (
        f"got key {REDACTED} from http://u:{REDACTED}@h/x; Bearer authentication required"
    )


@pytest.mark.parametrize(
    ("reply", "category"),
    [("echo_headers", errors.HTTP_4XX), ("echo_event", errors.STREAM_ERROR_EVENT)],
)
def test_headers_a_server_echoes_are_redacted_by_name(reply: str, category: str) -> None:
    timings = served(reply, SECRETS)
    assert timings.error_category == category
    message = timings.error_message or ""
    assert REDACTED in message and "x-goog-api-key" in message.lower()
    leaks = [name for name, value in SECRETS.items() if value.split()[-1][-10:] in message]
    assert not leaks, message


# ---------------------------------------------------------------- item 16: small wire items


def test_a_unicode_digit_content_length_is_bad_http() -> None:
    timings = served("unicode_length")
    assert timings.error_category == errors.BAD_HTTP, timings.error_message
    assert "Content-Length" in (timings.error_message or "")


def test_a_redirect_says_redirect_not_followed() -> None:
    timings = served("redirect")
    assert timings.error_category == errors.NOT_SSE
    assert timings.error_message == (
        "redirect (HTTP 307 to http://elsewhere.invalid/v1/chat), not followed"
    )


def test_a_gzip_body_we_did_not_ask_for_is_decoded_and_measured() -> None:
    # we send Accept-Encoding: identity; a server that compresses anyway is still read
    timings = served("gzip")
    assert timings.ok, timings.error_message
    assert timings.output_tokens >= 1 and len(timings.token_stamps) >= 1


def test_a_body_in_an_encoding_we_cannot_decode_says_what_arrived() -> None:
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: br\r\n"
        "Content-Length: 4\r\n\r\n"
    )
    timings, _ = stream_request(ScriptedConnection([head.encode() + b"\x0b\x02\x80x"]), request())
    assert timings.error_category == errors.NOT_SSE
    assert timings.error_message == "HTTP 200 with Content-Encoding: br, not an event stream"


def test_an_html_page_served_as_an_event_stream_says_what_arrived() -> None:
    timings = served("html")
    assert timings.error_category == errors.NOT_SSE
    assert "an HTML page (text/event-stream), not an event stream" in timings.error_message


def test_an_html_content_type_says_what_arrived() -> None:
    body = b"<html></html>"
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
    timings, _ = stream_request(ScriptedConnection([head.encode() + body]), request())
    assert timings.error_category == errors.NOT_SSE
    assert timings.error_message == "HTTP 200 with a text/html body, not an event stream"


def test_the_simulator_answers_deeply_nested_json_with_a_400() -> None:
    body = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(RequestError, match="nested too deeply") as raised:
        parse_request(
            body, "chat", request_id="r", default_model="m", default_max_tokens=8, arrival_perf_ns=0
        )
    assert raised.value.status == 400


# ---------------------------------------------------------------- item 9: the model lookup


@pytest.mark.parametrize(
    "body",
    [b'{"data": []}', b'{"data": [{"id": 5}]}', b"[" * 100_000, b'{"data": [{"id": ""}]}'],
    ids=["empty", "not-text", "nested", "blank"],
)
def test_a_models_answer_without_a_model_is_a_model_lookup_failure(body: bytes) -> None:
    with pytest.raises(errors.StreamError) as raised:
        first_model_id(body)
    assert raised.value.category == errors.MODEL_LOOKUP


def test_a_secret_cut_off_at_the_end_of_an_echo_is_redacted_too() -> None:
    key = "AIzaSyD-THISISAVERYLONGSECRETKEYVALUE-0123456789"
    headers = {"X-Goog-Api-Key": key, "X-My-Pass": "hunter22"}
    for cut in (3, 21, len(key) - 1):
        message = redact(f"bad request: key={key[:cut]}", headers)
        assert key[:cut] not in message and message.endswith("[redacted]"), message
    assert redact("password hunter22 wrong", headers) == "password [redacted] wrong"
    assert redact("ends in a", headers) == "ends in a"  # one letter is not a key's start


def test_escape_sequences_from_a_server_never_reach_a_terminal() -> None:
    message = redact("\x1b[2J\x1b]0;PWNED\x07 bad request", {})
    assert "\x1b" not in message and "\x07" not in message and "bad request" in message
