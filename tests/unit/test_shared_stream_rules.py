"""The rules every API's stream shares (``wire.stream_decoder``), on the vectors that found
them wanting: refusals are answers, every error shape keeps the server's message, tokens
are counted as the server counts them (token ids, logprobs), reasoning is told from the
answer, a prefix-cache count is read, another choice's events are not ours."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tpot_locust.common import errors
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import decode_error_body, decode_events


class Named(bytes):
    """An event with an SSE ``event:`` name, as the SSE parser hands it on."""

    name: str


def named(name: str, data: str) -> bytes:
    event = Named(data.encode())
    event.name = name
    return event


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **choice: Any) -> str:
    body = {"delta": delta if delta is not None else {}, "finish_reason": finish, **choice}
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, **body}]})


def decode(payloads: list[str | bytes], api: str = "chat") -> Any:
    raw = [p if isinstance(p, bytes) else p.encode() for p in payloads]
    return decode_events(list(range(1, len(raw) + 1)), raw, api)


def test_a_refusal_streams_as_the_answer_not_as_an_empty_stream() -> None:
    # two of the OpenAI SDK's recorded streams: the refusal text arrives as deltas
    decoded = decode(
        [
            chunk({"role": "assistant", "refusal": ""}),
            chunk({"refusal": "I'm sorry"}),
            chunk({"refusal": ", I can't."}),
            chunk({}, "stop"),
            "[DONE]",
        ]
    )
    assert decoded.error is None
    assert list(decoded.token_stamps) == [2, 3]
    assert decoded.text == "I'm sorry, I can't."


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            named("error", '{"error": {"code": 500, "message": "slot unavailable"}}'),
            "slot unavailable",
        ),  # llama.cpp's event: error
        (named("error", "plain words"), "plain words"),
        (
            '{"text": "NETWORK ERROR DUE TO HIGH TRAFFIC.", "error_code": 50001}',
            "NETWORK ERROR DUE TO HIGH TRAFFIC.",
        ),  # FastChat
        (
            '{"object": "error", "message": "out of KV blocks", "code": 400}',
            "out of KV blocks",
        ),  # vLLM's older shape
        ('{"error": {"message": "overloaded", "type": "server_error"}}', "overloaded"),
    ],
    ids=["llama.cpp", "llama.cpp-text", "fastchat", "object-error", "error-member"],
)
def test_every_error_shape_fails_the_request_with_the_server_message(
    payload: str | bytes, message: str
) -> None:
    decoded = decode([chunk({"content": "a"}), payload, "[DONE]"])
    assert decoded.error is not None
    assert decoded.error.category == errors.STREAM_ERROR_EVENT
    assert decoded.error.message == message


def test_fastchat_error_code_zero_is_no_error() -> None:
    ok = json.dumps(
        {
            "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}],
            "error_code": 0,
        }
    )
    decoded = decode([ok, chunk({}, "stop"), "[DONE]"])
    assert decoded.error is None and len(decoded.token_stamps) == 1


def test_token_ids_in_each_event_are_its_token_count() -> None:
    # speculative decoding / stream_interval: several tokens per event, vLLM's token_ids
    decoded = decode(
        [
            chunk({"content": "ab"}, token_ids=[5, 6]),
            chunk({"content": "cde"}, token_ids=[7, 8, 9]),
            chunk({}, "length"),
            "[DONE]",
        ]
    )
    assert decoded.error is None
    assert list(decoded.token_counts) == [2, 3] and decoded.output_tokens == 5
    assert decoded.count_source == "token_ids" and decoded.tokens_estimated


def test_logprob_entries_in_each_event_are_its_token_count() -> None:
    entries = [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -0.2}]
    decoded = decode(
        [
            chunk({"content": "ab"}, logprobs={"content": entries}),
            chunk({"content": "c"}, logprobs={"content": entries[:1]}),
            chunk({}, "length"),
            "[DONE]",
        ]
    )
    assert list(decoded.token_counts) == [2, 1] and decoded.count_source == "logprobs"


def test_completions_logprob_tokens_count_too() -> None:
    def event(text: str, tokens: list[str], finish: str | None = None) -> str:
        choice = {
            "index": 0,
            "text": text,
            "finish_reason": finish,
            "logprobs": {"tokens": tokens} if tokens else None,
        }
        return json.dumps({"choices": [choice]})

    decoded = decode([event("ab", ["a", "b"]), event("", [], "length"), "[DONE]"], "completions")
    assert list(decoded.token_counts) == [2] and decoded.count_source == "logprobs"


def test_counts_said_by_some_events_only_are_an_estimate() -> None:
    decoded = decode(
        [
            chunk({"content": "ab"}, token_ids=[5, 6]),
            chunk({"content": "c"}),
            chunk({}, "length"),
            "[DONE]",
        ]
    )
    assert list(decoded.token_counts) == [2, 1] and decoded.count_source == "events"
    assert not decoded.counts_from_usage


def test_reasoning_tokens_are_told_from_the_answer() -> None:
    decoded = decode(
        [
            chunk({"reasoning_content": "hmm"}),
            chunk({"reasoning": " so"}),
            chunk({"content": "Yes"}),
            chunk({"content": "."}),
            chunk({}, "stop"),
            "[DONE]",
        ]
    )
    assert list(decoded.token_stamps) == [1, 2, 3, 4]
    assert decoded.answer_stamp_ns == 3 and decoded.reasoning_tokens == 2
    assert decoded.text == "Yes."


def test_the_server_reported_reasoning_count_wins_and_cached_tokens_are_read() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    final = json.dumps({"choices": [], "usage": usage})
    decoded = decode(
        [
            chunk({"reasoning_content": "a"}),
            chunk({"content": "b"}),
            chunk({}, "stop"),
            final,
            "[DONE]",
        ]
    )
    assert decoded.reasoning_tokens == 3 and decoded.cached_prompt_tokens == 64
    assert decoded.prompt_tokens == 100 and decoded.output_tokens == 4


def test_null_usage_details_are_no_error() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "prompt_tokens_details": None}
    decoded = decode(
        [
            chunk({"content": "a"}),
            chunk({}, "stop"),
            json.dumps({"choices": [], "usage": usage}),
            "[DONE]",
        ]
    )
    assert decoded.error is None and decoded.cached_prompt_tokens is None


def test_another_choices_events_are_not_counted() -> None:
    other = json.dumps(
        {"choices": [{"index": 1, "delta": {"content": "x"}, "finish_reason": None}]}
    )
    decoded = decode([chunk({"content": "a"}), other, chunk({}, "stop"), "[DONE]"])
    assert list(decoded.token_stamps) == [1] and decoded.text == "a"


def test_llama_cpps_error_field_fails_the_request_with_its_message() -> None:
    """llama.cpp writes ``error: {json}`` (a field named error, not ``event: error``)."""
    parser = SSEParser()
    events = parser.feed(
        b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
        b'error: {"code": 500, "message": "slot unavailable"}\n\n'
    )
    decoded = decode_events([1, 2], events, "chat")
    assert decoded.error is not None and decoded.error.category == errors.STREAM_ERROR_EVENT
    assert decoded.error.message == "slot unavailable"


def test_a_surrogate_pair_split_over_events_joins_and_a_lone_one_is_replaced() -> None:
    pair = decode(
        [chunk({"content": "\ud83d"}), chunk({"content": "\ude00"}), chunk({}, "stop"), "[DONE]"]
    )
    assert pair.text == "\U0001f600"
    lone = decode([chunk({"content": "a\ud83d"}), chunk({}, "stop"), "[DONE]"])
    assert lone.text == "a\ufffd"
    lone.text.encode("utf-8")  # what a tokenizer will be given: no lone surrogate


def test_a_deeply_nested_error_body_is_the_start_of_the_body() -> None:
    body = b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert decode_error_body(body) == body[:200].decode()
