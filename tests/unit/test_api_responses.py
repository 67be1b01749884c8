"""OpenAI's Responses API dialect: a stream in the documented format and vLLM's real one,
the simulator's own bytes, the error shapes and reasoning, through the SSE parser and the
stream decoder."""

from __future__ import annotations

import json
import random
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
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.apis.openai_responses import DIALECT
from tpot_locust.common.distributions import parse_distribution
from tpot_locust.common.errors import BAD_JSON, STREAM_ERROR_EVENT, TRUNCATED
from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import full_body
from tpot_locust.sim.request import decide_length
from tpot_locust.wire.stream_decoder import decode_events

API = DIALECT.name
RECORDING = Path(__file__).resolve().parents[1] / "data" / "streams" / "vllm-responses.jsonl"
ITEM = "msg_67ccd3acc8d48190a77525dc6de64b4104becd42"


def text_delta(sequence: int, text: str, **extra: Any) -> bytes:
    return sse(
        "response.output_text.delta",
        sequence_number=sequence,
        item_id=ITEM,
        output_index=0,
        content_index=0,
        delta=text,
        **extra,
    )


def response(status: str, usage: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_67ccd3a9da748190",
        "object": "response",
        "created_at": 1741476777,
        "status": status,
        "model": "gpt-4o-2024-08-06",
        "output": [],
        "usage": usage,
        **extra,
    }


USAGE = {
    "input_tokens": 37,
    "input_tokens_details": {"cached_tokens": 32},
    "output_tokens": 4,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 41,
}
# The documented stream (OpenAI API reference, Streaming events for Responses): OpenAI's
# field order, its ``obfuscation`` padding, a max-length end as ``response.incomplete``.
DOCUMENTED = [
    sse("response.created", sequence_number=0, response=response("in_progress")),
    sse("response.in_progress", sequence_number=1, response=response("in_progress")),
    sse(
        "response.output_item.added",
        sequence_number=2,
        output_index=0,
        item={
            "id": ITEM,
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        },
    ),
    sse(
        "response.content_part.added",
        sequence_number=3,
        item_id=ITEM,
        output_index=0,
        content_index=0,
        part={"type": "output_text", "annotations": [], "text": ""},
    ),
    text_delta(4, "Hi", logprobs=[], obfuscation="aBc"),
    text_delta(5, " there", logprobs=[], obfuscation="d"),
    text_delta(6, ', "you"', logprobs=[], obfuscation="xYz"),
    text_delta(7, "!", logprobs=[], obfuscation="q"),
    sse(
        "response.output_text.done",
        sequence_number=8,
        item_id=ITEM,
        output_index=0,
        content_index=0,
        text='Hi there, "you"!',
        logprobs=[],
    ),
    sse(
        "response.content_part.done",
        sequence_number=9,
        item_id=ITEM,
        output_index=0,
        content_index=0,
        part={"type": "output_text", "text": 'Hi there, "you"!'},
    ),
    sse(
        "response.output_item.done",
        sequence_number=10,
        output_index=0,
        item={"id": ITEM, "type": "message", "status": "incomplete", "role": "assistant"},
    ),
    sse(
        "response.incomplete",
        sequence_number=11,
        response=response("incomplete", USAGE, incomplete_details={"reason": "max_output_tokens"}),
    ),
]


COMPLETED = sse("response.completed", sequence_number=9, response=response("completed"))


def test_documented_stream_read_by_read() -> None:
    result = decode_reads(API, DOCUMENTED)
    assert result.error is None
    assert list(result.token_stamps) == [4, 5, 6, 7] and list(result.token_counts) == [1] * 4
    assert result.text == 'Hi there, "you"!'
    assert (result.output_tokens, result.prompt_tokens, result.cached_prompt_tokens) == (4, 37, 32)
    assert result.finish_reason == "max_output_tokens" and result.done
    assert result.count_source == "usage" or not result.tokens_estimated


@pytest.mark.parametrize("size", [1, 7, 64])
def test_documented_stream_split_anywhere_decodes_alike_fast_or_in_full(size: int) -> None:
    result = decoded_alike(API, b"".join(DOCUMENTED), [size])
    assert result.error is None and result.text == 'Hi there, "you"!' and result.output_tokens == 4


def test_a_finished_answer_says_completed() -> None:
    end = sse("response.completed", sequence_number=5, response=response("completed", USAGE))
    result = decode_reads(API, [*DOCUMENTED[:5], end])
    assert result.error is None and result.finish_reason == "completed"


def test_vllms_real_stream_ends_a_max_length_answer_with_completed_status_incomplete() -> None:
    """vLLM sends ``response.completed`` whose status is ``incomplete``, reason
    ``max_output_tokens``: read as the max-length finish it is; some of its deltas hold
    more than one token, which the usage counts."""
    meta, body = recorded_body(RECORDING)
    result = decode_reads(API, split_reads(body, 100))
    assert result.error is None and result.finish_reason == "max_output_tokens"
    assert result.output_tokens == meta["max_tokens"] == 12
    assert len(result.token_stamps) == body.count(b"event: response.output_text.delta")
    assert result.prompt_tokens == 23 and result.cached_prompt_tokens == 0


def test_the_json_type_names_the_event_without_an_event_line() -> None:
    """transformers serve writes no ``event:`` lines: the ``type`` in the JSON is read."""
    reads = [chunk.partition(b"\n")[2] for chunk in DOCUMENTED]  # the data lines only
    result = decode_reads(API, reads)
    assert result.error is None and result.text == 'Hi there, "you"!'
    assert result.finish_reason == "max_output_tokens"


def test_the_event_name_serves_when_the_json_has_no_type() -> None:
    delta = b'event: response.output_text.delta\ndata: {"delta":"a"}\n\n'
    end = b'event: response.completed\ndata: {"response":{"status":"completed"}}\n\n'
    stream = delta + end
    result = decode_reads(API, [stream])
    assert result.error is None and result.text == "a" and result.finish_reason == "completed"


def test_logprob_entries_count_a_deltas_tokens() -> None:
    entry = {"token": "x", "logprob": -0.1, "top_logprobs": []}
    reads = [
        text_delta(0, "ab", logprobs=[entry, entry]),
        text_delta(1, "c", logprobs=[entry]),
        COMPLETED,
    ]
    result = decode_reads(API, reads)
    assert list(result.token_counts) == [2, 1] and result.count_source == "logprobs"
    assert result.output_tokens == 3 and result.tokens_estimated  # no usage: the sum


def test_tool_call_arguments_are_answer_tokens() -> None:
    reads = [
        sse(
            "response.function_call_arguments.delta",
            sequence_number=0,
            item_id="fc_1",
            output_index=0,
            delta='{"city":',
        ),
        sse(
            "response.function_call_arguments.delta",
            sequence_number=1,
            item_id="fc_1",
            output_index=0,
            delta='"Paris"}',
        ),
        COMPLETED,
    ]
    result = decode_reads(API, reads)
    assert result.error is None and len(result.token_stamps) == 2 and result.text == ""
    assert result.answer_stamp_ns == 0 and result.reasoning_tokens == 0


def test_reasoning_deltas_are_reasoning_tokens() -> None:
    usage = {**USAGE, "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3}}
    reads = [
        sse(
            "response.reasoning_text.delta",
            sequence_number=0,
            item_id="rs_1",
            output_index=0,
            content_index=0,
            delta="Let me",
        ),
        sse(
            "response.reasoning_summary_text.delta",
            sequence_number=1,
            item_id="rs_1",
            output_index=0,
            summary_index=0,
            delta=" think",
        ),
        sse(
            "response.reasoning_text.done",
            sequence_number=2,
            item_id="rs_1",
            output_index=0,
            content_index=0,
            text="Let me think",
        ),
        text_delta(3, "Yes"),
        text_delta(4, "."),
        sse("response.completed", sequence_number=5, response=response("completed", usage)),
    ]
    result = decode_reads(API, reads)
    assert result.error is None and result.text == "Yes."  # reasoning is no answer text
    assert list(result.token_stamps) == [0, 1, 3, 4] and result.answer_stamp_ns == 3
    assert result.reasoning_tokens == 3  # the server's count wins over the 2 events


def test_error_event_fails_with_the_servers_message() -> None:
    error = sse(
        "error", sequence_number=5, code="ERR_SOMETHING", message="Something went wrong", param=None
    )
    result = decode_reads(API, [*DOCUMENTED[:5], error])
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert "Something went wrong" in result.error.message
    assert list(result.token_stamps) == [4]


def test_failed_response_fails_with_its_error() -> None:
    failed = response("failed", error={"code": "server_error", "message": "The model crashed"})
    stamps, payloads = (
        [0, 1],
        [
            DOCUMENTED[4].split(b"data: ")[1].strip(),
            json.dumps(
                {"type": "response.failed", "sequence_number": 6, "response": failed}
            ).encode(),
        ],
    )
    result = decode_events(stamps, payloads, DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert result.error.message == "The model crashed"


def test_vllms_error_member_fails_the_request() -> None:
    """vLLM's GenerationError in a stream: ``{"error": {...}}``."""
    payload = b'{"error":{"message":"Internal server error","type":"InternalServerError",'
    payload += b'"param":null,"code":500}}'
    result = decode_events([0], [payload], DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert result.error.message == "Internal server error"


def test_a_stream_cut_before_the_last_event_is_truncated() -> None:
    result = decode_reads(API, DOCUMENTED[:-1])
    assert result.error is not None and result.error.category == TRUNCATED


def test_a_count_no_request_can_have_fails_the_request() -> None:
    bad = response("completed", {**USAGE, "output_tokens": -4})
    result = decode_reads(API, [*DOCUMENTED[:5], sse("response.completed", response=bad)])
    assert result.error is not None and result.error.category == BAD_JSON


def test_body_in_the_apis_words() -> None:
    history = [{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c"}]
    body = DIALECT.body(history, BodyOptions(model="m", max_tokens=9))
    assert body == {
        "model": "m",
        "input": history,
        "stream": True,
        "max_output_tokens": 9,
        "store": False,
        "ignore_eos": True,
    }
    plain = DIALECT.body(history, BodyOptions(model="m", max_tokens=9, ignore_eos=False))
    assert "ignore_eos" not in plain and "min_tokens" not in plain


# -- the simulator --------------------------------------------------------------------------


RESPONSE_ID = "resp_0123456789abcdef0123"
ASK = {
    "model": "tpot-sim",
    "input": [{"role": "user", "content": "one two three"}],
    "stream": True,
    "max_output_tokens": 5,
    "ignore_eos": True,
}


@pytest.mark.parametrize(
    ("finish", "words"), [("length", "max_output_tokens"), ("stop", "completed")]
)
def test_the_simulators_stream_decodes_to_its_tokens(finish: str, words: str) -> None:
    completion = None if finish == "length" else 3
    request, stream = simulated_stream(API, ASK, completion, finish, response_id=RESPONSE_ID)
    assert request.prompt_tokens == 3 and request.max_tokens == 5 and request.ignore_eos
    assert_sim_decoded(decoded_alike(API, stream, (1, 13, len(stream))), request, words)


def test_the_simulators_events_are_named_numbered_and_typed_as_vllms() -> None:
    _, stream = simulated_stream(API, ASK, response_id=RESPONSE_ID)
    names, events = named_events(stream)
    assert names == [event["type"] for event in events]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[4:9] == ["response.output_text.delta"] * 5
    assert names[9:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    last = events[-1]["response"]
    assert last["status"] == "incomplete"
    assert last["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["usage"]["input_tokens"] == 3 and last["usage"]["output_tokens"] == 5
    assert events[0]["response"]["usage"] is None and events[0]["response"]["model"] == "tpot-sim"
    assert all(list(event) == [*list(event)[:-2], "sequence_number", "type"] for event in events)


def test_the_simulator_reads_a_text_input_and_instructions() -> None:
    body = {**ASK, "input": "one two", "instructions": "be brief now"}
    request, _ = simulated_stream(API, body, response_id=RESPONSE_ID)
    assert request.prompt_tokens == 5


def test_the_simulator_takes_its_default_length_without_max_output_tokens() -> None:
    body = {key: value for key, value in ASK.items() if key != "max_output_tokens"}
    request, _ = simulated_stream(API, body, response_id=RESPONSE_ID)
    assert request.max_tokens == 16


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"input": None}, "'input'"),
        ({"input": []}, "'input'"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": "5"}, "max_output_tokens"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
        ({"instructions": 3}, "instructions"),
    ],
)
def test_the_simulator_refuses_what_vllm_refuses(change: dict[str, Any], words: str) -> None:
    refused = refusal(API, {**ASK, **change})
    assert words in refused.message and refused.status == 400


def test_without_ignore_eos_the_simulator_may_stop_early() -> None:
    body = {**ASK, "ignore_eos": False, "max_output_tokens": 50}
    request = sim_request(API, body)
    decide_length(request, parse_distribution(3), random.Random(1))
    assert (request.completion_tokens, request.finish_reason) == (3, "stop")


def test_the_simulators_whole_answer() -> None:
    body = {**ASK, "stream": False}
    request = sim_request(API, body, 2, "stop")
    whole = json.loads(full_body(request, "resp_1", 0, vocab.text(2)))
    assert whole["status"] == "completed" and whole["usage"]["output_tokens"] == 2
    assert whole["output"][0]["content"][0]["text"] == vocab.text(2)


def test_the_last_events_kind_serves_where_its_response_has_no_status() -> None:
    incomplete = sse("response.incomplete", response={"incomplete_details": {"reason": "x"}})
    assert decode_reads(API, [DOCUMENTED[4], incomplete]).finish_reason == "x"
    failed = decode_reads(API, [DOCUMENTED[4], sse("response.failed", response={})])
    assert failed.error is not None and failed.error.category == STREAM_ERROR_EVENT
