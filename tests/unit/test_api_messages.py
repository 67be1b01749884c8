"""Anthropic's Messages API dialect: a stream in the documented format and vLLM's real one,
the simulator's own bytes, the error shape and extended thinking, through the SSE parser
and the stream decoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dialect_streams import (
    assert_sim_decoded,
    decode_reads,
    decoded_alike,
    named_events,
    recorded_body,
    refusal,
    sim_request,
    simulated_stream,
    split_reads,
)
from tests.helpers.dialect_streams import sse_event as sse
from tpot_locust.apis.anthropic_messages import DIALECT
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.common.errors import BAD_JSON, STREAM_ERROR_EVENT, TRUNCATED
from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import full_body
from tpot_locust.wire.stream_decoder import decode_events

API = DIALECT.name
RECORDING = Path(__file__).resolve().parents[1] / "data" / "streams" / "vllm-messages.jsonl"


def text_delta(text: str, index: int = 0) -> bytes:
    return sse("content_block_delta", index=index, delta={"type": "text_delta", "text": text})


START_USAGE = {
    "input_tokens": 25,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 100,
    "output_tokens": 1,
}
MESSAGE = {
    "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
    "type": "message",
    "role": "assistant",
    "content": [],
    "model": "claude-sonnet-4-5",
    "stop_reason": None,
    "stop_sequence": None,
    "usage": START_USAGE,
}
# Anthropic's API reference, "Streaming Messages": the documented sequence and field order.
DOCUMENTED = [
    sse("message_start", message=MESSAGE),
    sse("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    sse("ping"),
    text_delta("Hello"),
    text_delta(', "world"'),
    sse("ping"),
    text_delta("!"),
    sse("content_block_stop", index=0),
    sse(
        "message_delta",
        delta={"stop_reason": "end_turn", "stop_sequence": None},
        usage={"output_tokens": 3},
    ),
    sse("message_stop"),
]


def test_documented_stream_read_by_read() -> None:
    result = decode_reads(API, DOCUMENTED)
    assert result.error is None
    assert list(result.token_stamps) == [3, 4, 6] and list(result.token_counts) == [1] * 3
    assert result.text == 'Hello, "world"!'
    # the prompt is fresh + cached input; the start's output_tokens (1) is no count
    assert (result.output_tokens, result.prompt_tokens, result.cached_prompt_tokens) == (
        3,
        125,
        100,
    )
    assert result.finish_reason == "end_turn" and result.done and not result.tokens_estimated


@pytest.mark.parametrize("size", [1, 5, 64])
def test_documented_stream_split_anywhere_decodes_alike_fast_or_in_full(size: int) -> None:
    result = decoded_alike(API, b"".join(DOCUMENTED), [size])
    assert result.error is None and result.text == 'Hello, "world"!' and result.output_tokens == 3


def test_the_starts_output_tokens_is_not_the_count_of_a_stream_cut_short() -> None:
    """Cut after two deltas: no completion count from message_start's output_tokens (1),
    so the count is the events', and the stream is reported truncated."""
    result = decode_reads(API, DOCUMENTED[:5])
    assert result.error is not None and result.error.category == TRUNCATED
    assert result.completion_tokens is None and sum(result.token_counts) == 2


def test_vllms_real_stream_ends_with_max_tokens() -> None:
    meta, body = recorded_body(RECORDING)
    result = decode_reads(API, split_reads(body, 100))
    assert result.error is None and result.finish_reason == "max_tokens"
    assert result.output_tokens == len(result.token_stamps) == meta["max_tokens"] == 12
    assert result.prompt_tokens == 23 and result.cached_prompt_tokens is None


def test_the_json_type_names_the_event_without_an_event_line() -> None:
    reads = [chunk.partition(b"\n")[2] for chunk in DOCUMENTED]  # the data lines only
    result = decode_reads(API, reads)
    assert result.error is None and result.text == 'Hello, "world"!'
    assert result.finish_reason == "end_turn"


def test_the_event_name_serves_when_the_json_has_no_type() -> None:
    delta = b'event: content_block_delta\ndata: {"delta":{"type":"text_delta","text":"a"}}\n\n'
    end = b'event: message_delta\ndata: {"delta":{"stop_reason":"end_turn"}}\n\n'
    result = decode_reads(API, [delta, end, b"event: message_stop\ndata: {}\n\n"])
    assert result.error is None and result.text == "a" and result.done


def test_thinking_is_reasoning_and_tool_json_is_answer() -> None:
    signature = {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrk"}
    json_delta = {"type": "input_json_delta", "partial_json": '{"location": "San Fra'}
    reads = [
        sse("message_start", message=MESSAGE),
        sse(
            "content_block_start",
            index=0,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        ),
        sse(
            "content_block_delta",
            index=0,
            delta={"type": "thinking_delta", "thinking": "Let me solve"},
        ),
        sse("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": " this."}),
        sse("content_block_delta", index=0, delta=signature),
        sse("content_block_stop", index=0),
        sse("content_block_start", index=1, content_block={"type": "text", "text": ""}),
        text_delta("27", index=1),
        sse("content_block_stop", index=1),
        sse(
            "content_block_start",
            index=2,
            content_block={
                "type": "tool_use",
                "id": "toolu_01",
                "name": "get_weather",
                "input": {},
            },
        ),
        sse("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ""}),
        sse("content_block_delta", index=2, delta=json_delta),
        sse("content_block_stop", index=2),
        sse(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 9},
        ),
        sse("message_stop"),
    ]
    result = decode_reads(API, reads)
    assert result.error is None and result.text == "27"
    assert list(result.token_stamps) == [2, 3, 7, 11]  # no signature, no empty JSON
    assert result.reasoning_tokens == 2 and result.answer_stamp_ns == 7
    assert result.finish_reason == "tool_use" and result.output_tokens == 9


def test_error_event_fails_with_the_servers_message() -> None:
    error = sse("error", error={"type": "overloaded_error", "message": "Overloaded"})
    result = decode_reads(API, [*DOCUMENTED[:4], error])
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert result.error.message == "Overloaded"


def test_error_without_event_line_fails_too() -> None:
    payload = b'{"type":"error","error":{"type":"api_error","message":"Internal server error"}}'
    result = decode_events([0], [payload], DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert result.error.message == "Internal server error"


def test_a_count_no_request_can_have_fails_the_request() -> None:
    bad = sse("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1.5})
    result = decode_reads(API, [*DOCUMENTED[:4], bad])
    assert result.error is not None and result.error.category == BAD_JSON


def test_body_headers_and_models_list_in_the_apis_words() -> None:
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a b"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "d"},
    ]
    body = DIALECT.body(history, BodyOptions(model="m", max_tokens=9))
    assert body == {
        "model": "m",
        "max_tokens": 9,
        "messages": history[1:],
        "stream": True,
        "system": "Be brief.",
    }
    assert DIALECT.headers(None) == {"anthropic-version": "2023-06-01"}
    assert DIALECT.headers("k") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}
    listing = DIALECT.sim_models("tpot-sim", 0)
    assert listing["data"][0]["created_at"] == "1970-01-01T00:00:00Z"
    assert (listing["first_id"], listing["has_more"]) == ("tpot-sim", False)
    assert DIALECT.first_model(json.dumps(listing).encode()) == "tpot-sim"


# -- the simulator --------------------------------------------------------------------------

PARTS = [{"type": "text", "text": "one two three"}]  # content as text blocks
ASK = {
    "model": "tpot-sim",
    "max_tokens": 5,
    "stream": True,
    "system": "be brief",
    "messages": [{"role": "user", "content": PARTS}],
}


MESSAGE_ID = "msg_0123456789"


@pytest.mark.parametrize(("finish", "words"), [("length", "max_tokens"), ("stop", "end_turn")])
def test_the_simulators_stream_decodes_to_its_tokens(finish: str, words: str) -> None:
    completion = None if finish == "length" else 3
    request, stream = simulated_stream(API, ASK, completion, finish, response_id=MESSAGE_ID)
    assert request.prompt_tokens == 5 and request.max_tokens == 5 and not request.ignore_eos
    assert_sim_decoded(decoded_alike(API, stream, (1, 13, len(stream))), request, words)


def test_the_simulators_events_follow_anthropics_sequence() -> None:
    _, stream = simulated_stream(API, ASK, response_id=MESSAGE_ID)
    names, events = named_events(stream)
    assert names == [event["type"] for event in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 5,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(list(event)[0] == "type" for event in events)
    assert events[0]["message"]["usage"]["input_tokens"] == 5
    assert events[0]["message"]["id"] == MESSAGE_ID
    assert events[-2]["usage"] == {"output_tokens": 5}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model": None}, "model: Field required"),
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"system": 3}, "system"),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_the_simulator_refuses_what_the_api_refuses(change: dict[str, Any], words: str) -> None:
    refused = refusal(API, {**ASK, **change})
    assert words in refused.message and refused.status == 400


def test_the_simulator_has_no_ignore_eos_on_this_api() -> None:
    assert not sim_request(API, {**ASK, "ignore_eos": True}).ignore_eos


def test_the_simulators_whole_answer() -> None:
    request = sim_request(API, {**ASK, "stream": False}, 2)
    whole = json.loads(full_body(request, "msg_1", 0, vocab.text(2)))
    assert whole["stop_reason"] == "max_tokens" and whole["usage"]["output_tokens"] == 2
    assert whole["content"] == [{"type": "text", "text": vocab.text(2)}]


def test_a_deltas_input_tokens_without_its_cache_counts_leave_the_prompt_as_started() -> None:
    start = sse(
        "message_start",
        message={
            "id": "m",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "x",
            "stop_reason": None,
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 0,
                "output_tokens": 1,
            },
        },
    )
    delta = sse(
        "message_delta",
        delta={"stop_reason": "end_turn"},
        usage={"input_tokens": 5, "output_tokens": 1},
    )
    decoded = decode_reads(API, [start, text_delta("Hi"), delta, sse("message_stop")])
    assert decoded.error is None
    assert decoded.prompt_tokens == 2005 and decoded.cached_prompt_tokens == 2000
