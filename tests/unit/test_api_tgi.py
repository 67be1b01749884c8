"""TGI's ``/generate_stream`` dialect: a recorded-format stream, the simulator's own bytes,
its error shape and inline thinking, through the SSE parser and the stream decoder."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tests.helpers.dialect_streams import (
    assert_sim_decoded,
    decode_reads,
    refusal,
    sim_request,
    simulated_reads,
    split_reads,
)
from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.apis.tgi import DIALECT
from tpot_locust.common.errors import STREAM_ERROR_EVENT, TRUNCATED
from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import sim_context
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import decode_events

API = DIALECT.name


def token_event(index: int, text: str, special: bool = False, **last: Any) -> bytes:
    token = {"id": 100 + index, "text": text, "logprob": -0.5, "special": special}
    event = {"index": index, "token": token, "generated_text": None, "details": None, **last}
    return b"data:" + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


# TGI 3.x's documented shape (router/src/lib.rs StreamResponse), serde's compact JSON; axum's
# SSE writes ``data:`` without a space and sends ``:`` keep-alive comments.
RECORDED = [
    token_event(1, " The"),
    b":\n\n",
    token_event(2, " capital"),
    token_event(3, " is"),
    token_event(4, " Paris"),
    token_event(
        5,
        "</s>",
        special=True,
        generated_text=" The capital is Paris",
        details={
            "finish_reason": "eos_token",
            "generated_tokens": 5,
            "seed": None,
            "input_length": 7,
        },
    ),
]


def test_recorded_stream_read_by_read() -> None:
    result = decode_reads(API, RECORDED)
    assert result.error is None
    assert list(result.token_stamps) == [0, 2, 3, 4, 5]  # the special EOS token counts
    assert list(result.token_counts) == [1] * 5 and result.count_source == "token"
    assert result.text == " The capital is Paris"  # special text is not answer text
    assert (result.output_tokens, result.prompt_tokens) == (5, 7)
    assert result.finish_reason == "eos_token" and result.done


def test_recorded_stream_split_anywhere() -> None:
    whole = b"".join(RECORDED)
    reads = split_reads(whole, 7)
    result = decode_reads(API, reads)
    assert result.error is None and result.text == " The capital is Paris"
    assert (len(result.token_stamps), result.output_tokens) == (5, 5)


def test_without_details_the_end_has_no_finish_reason() -> None:
    last = token_event(2, " b", generated_text=" a b")
    result = decode_reads(API, [token_event(1, " a"), last])
    assert result.done and result.error is not None and result.error.category == TRUNCATED


def test_body_asks_max_new_tokens_and_details() -> None:
    history = [{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c"}]
    body = DIALECT.body(history, BodyOptions(model=None, max_tokens=9))
    assert body == {"inputs": "a b\n\nc", "parameters": {"max_new_tokens": 9, "details": True}}
    assert DIALECT.models_path is None and dialect_named("tgi") is DIALECT


@pytest.mark.parametrize(("finish", "words"), [("length", "length"), ("stop", "eos_token")])
def test_simulator_stream_decodes_to_its_tokens(finish: str, words: str) -> None:
    body = DIALECT.body([{"role": "user", "content": "one two three"}], BodyOptions(None, 6))
    request = sim_request(API, body, 6 if finish == "length" else 4, finish)
    assert (request.prompt_tokens, request.max_tokens, request.stream) == (3, 6, True)
    result = decode_reads(API, simulated_reads(request))
    assert_sim_decoded(result, request, words)
    assert result.count_source == "token"


def test_simulator_events_are_tgi_stream_responses() -> None:
    body = DIALECT.body([{"role": "user", "content": "x"}], BodyOptions(None, 2))
    request = sim_request(API, body, 2, "length")
    events = [json.loads(e) for read in simulated_reads(request) for e in SSEParser().feed(read)]
    assert list(events[0]) == ["index", "token", "generated_text", "details"]
    assert [e["index"] for e in events] == [1, 2]
    assert list(events[0]["token"]) == ["id", "text", "logprob", "special"]
    assert events[0]["generated_text"] is None and events[0]["details"] is None
    assert events[1]["details"] == {
        "finish_reason": "length",
        "generated_tokens": 2,
        "seed": None,
        "input_length": 1,
    }
    assert isinstance(events[1]["generated_text"], str)


def test_simulator_without_details_sends_none() -> None:
    request = sim_request(API, {"inputs": "x", "parameters": {"max_new_tokens": 2}}, 2, "length")
    events = [json.loads(e) for read in simulated_reads(request) for e in SSEParser().feed(read)]
    assert events[-1]["details"] is None and isinstance(events[-1]["generated_text"], str)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"inputs": ""}, "`inputs` cannot be empty"),
        ({"inputs": 3}, "inputs: expected a string"),
        (
            {"inputs": "x", "parameters": {"max_new_tokens": 0}},
            "`max_new_tokens` must be strictly positive",
        ),
        ({"inputs": "x", "parameters": {"max_new_tokens": "9"}}, "expected u32"),
        ({"inputs": "x", "parameters": []}, "parameters: expected struct"),
    ],
)
def test_simulator_refuses_as_tgi_does(body: dict[str, Any], message: str) -> None:
    refused = refusal(API, body)
    assert refused.status == 422 and message in refused.message


def test_default_max_new_tokens_is_the_simulators() -> None:
    assert sim_request(API, {"inputs": "x"}, 1, "length").max_tokens == 16


def test_error_event_fails_with_the_servers_message() -> None:
    error = {
        "error": "Request failed during generation: Server error: CUDA OOM",
        "error_type": "generation",
    }
    payloads = [RECORDED[0][5:-2], json.dumps(error).encode()]
    result = decode_events([0, 1], payloads, DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert "CUDA OOM" in str(result.error)


def test_inline_thinking_gives_reasoning_tokens() -> None:
    reads = [
        token_event(1, "<think>"),
        token_event(2, " hmm"),
        token_event(3, "</think>"),
        token_event(
            4,
            " Yes",
            generated_text="<think> hmm</think> Yes",
            details={
                "finish_reason": "length",
                "generated_tokens": 4,
                "seed": None,
                "input_length": 2,
            },
        ),
    ]
    result = decode_reads(API, reads)
    assert result.error is None
    assert result.reasoning_tokens == 3 and result.answer_stamp_ns == 3
    assert result.text == " Yes" and result.output_tokens == 4


def test_each_stream_has_its_own_reader() -> None:
    first, second = DIALECT.for_stream(), DIALECT.for_stream()
    opened = json.loads(token_event(1, "<think>")[5:])
    assert first.read(opened, None).reasoning
    plain = json.loads(token_event(1, " a")[5:])
    assert not second.read(plain, None).reasoning and second.read(plain, None).text == " a"


def test_generated_text_is_the_whole_answer_from_the_context() -> None:
    """``SimContext.answer_text`` (the simulator's vocabulary) fills ``generated_text``."""
    request = sim_request(API, {"inputs": "x", "parameters": {"details": True}}, 3, "stop")
    context = sim_context(request, "rid", 0)
    _, event = DIALECT.sim_last_token(context)  # type: ignore[misc]
    assert event["generated_text"] == vocab.text(3)
    _, plain = DIALECT.sim_last_token(replace(context, answer_text=None))  # type: ignore[misc]
    assert plain["generated_text"] == ""
