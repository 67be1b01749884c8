"""SGLang's native ``/generate`` dialect: recorded-format streams (whole text so far, and
incremental), the simulator's own bytes, its error shapes and inline thinking, through the
SSE parser and the stream decoder."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.dialect_streams import (
    assert_sim_decoded,
    decode_reads,
    refusal,
    sim_request,
    simulated_reads,
)
from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.apis.sglang import DIALECT
from tpot_locust.apis.think_tags import InlineThinking
from tpot_locust.common.errors import STREAM_ERROR_EVENT
from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import full_body
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import decode_events

API = DIALECT.name
WORDS = [" The", " capital", " is", " Paris", "."]


def meta(completion: int, finish: Any = None, **more: Any) -> dict[str, Any]:
    """meta_info as tokenizer_manager._handle_batch_output builds it."""
    return {
        "id": "6f1c2b",
        "finish_reason": finish,
        "prompt_tokens": 7,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion,
        "cached_tokens": 3,
        **more,
    }


def sse(event: dict[str, Any] | str) -> bytes:
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    return b"data: " + data.encode() + b"\n\n"


def recorded(cumulative: bool, ids: bool = True, words: list[str] = WORDS) -> list[bytes]:
    """A stream of ``words`` (one token each; the last two coalesced into one event),
    finishing with ``length``."""
    steps = [1, 2, 3, len(words)]
    events, done = [], 0
    for step in steps:
        new = words[done:step]
        event: dict[str, Any] = {"text": "".join(words[:step] if cumulative else new)}
        if ids:
            event["output_ids"] = list(range(step)) if cumulative else list(range(done, step))
        finish = {"type": "length", "length": len(words)} if step == len(words) else None
        event["meta_info"] = meta(step, finish)
        events.append(sse(event))
        done = step
    return [*events, sse("[DONE]")]


@pytest.mark.parametrize(
    ("cumulative", "ids"),
    [(True, True), (False, True), (True, False)],
    ids=["whole-text", "incremental", "whole-text-no-ids"],
)
def test_recorded_stream_read_by_read(cumulative: bool, ids: bool) -> None:
    result = decode_reads(API, recorded(cumulative, ids))
    assert result.error is None
    assert result.text == "".join(WORDS)
    assert list(result.token_stamps) == [0, 1, 2, 3]
    assert list(result.token_counts) == [1, 1, 1, 2]  # the running count's growth
    assert result.count_source == "usage"
    assert (result.output_tokens, result.prompt_tokens, result.cached_prompt_tokens) == (5, 7, 3)
    assert result.finish_reason == "length" and result.done


def test_repeated_words_in_incremental_mode_are_not_taken_for_whole_text() -> None:
    words = [" the", " the", " the", " end", "."]
    result = decode_reads(API, recorded(cumulative=False, words=words))
    assert result.error is None and result.text == "".join(words)


def test_stop_finish_and_empty_detokenized_text() -> None:
    """A token whose text the detokenizer holds back (half a UTF-8 character) still counts."""
    events = [
        sse({"text": " caf", "output_ids": [1], "meta_info": meta(1)}),
        sse({"text": " caf", "output_ids": [1, 2], "meta_info": meta(2)}),
        sse(
            {
                "text": " café",
                "output_ids": [1, 2, 3],
                "meta_info": meta(3, {"type": "stop", "matched": 2}),
            }
        ),
        sse("[DONE]"),
    ]
    result = decode_reads(API, events)
    assert result.error is None and result.text == " café"
    assert len(result.token_stamps) == 3 and result.finish_reason == "stop"


def test_body_asks_exactly_max_tokens() -> None:
    history = [{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c"}]
    body = DIALECT.body(history, BodyOptions(model=None, max_tokens=9))
    assert body == {
        "text": "a b\n\nc",
        "stream": True,
        "sampling_params": {"max_new_tokens": 9, "min_new_tokens": 9, "ignore_eos": True},
    }
    loose = DIALECT.body(history, BodyOptions(None, 9, ignore_eos=False, force_min_tokens=False))
    assert loose["sampling_params"] == {"max_new_tokens": 9}
    assert DIALECT.models_path is None and dialect_named("sglang") is DIALECT


@pytest.mark.parametrize(
    ("finish", "completion", "reason"),
    [("length", 6, {"type": "length", "length": 6}), ("stop", 4, {"type": "stop", "matched": 2})],
)
def test_simulator_stream_decodes_to_its_tokens(
    finish: str, completion: int, reason: dict[str, Any]
) -> None:
    body = DIALECT.body([{"role": "user", "content": "one two three"}], BodyOptions(None, 6))
    request = sim_request(API, body, completion, finish)
    assert (request.prompt_tokens, request.max_tokens, request.min_tokens) == (3, 6, 6)
    assert request.ignore_eos and request.stream
    reads = simulated_reads(request)
    result = decode_reads(API, reads)
    assert_sim_decoded(result, request, finish)
    assert result.count_source == "usage"
    events = [e for read in reads for e in SSEParser().feed(read)]
    assert events[-1] == b"[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert list(parsed[0]) == ["text", "output_ids", "meta_info"]
    assert [e["meta_info"]["completion_tokens"] for e in parsed] == list(range(1, completion + 1))
    assert all(e["meta_info"]["finish_reason"] is None for e in parsed[:-1])
    assert parsed[-1]["meta_info"]["finish_reason"] == reason
    assert parsed[1]["output_ids"] == [1]  # incremental: only the new ids


def test_simulator_whole_answer() -> None:
    request = sim_request(API, {"text": "a b", "sampling_params": {"max_new_tokens": 3}}, 3)
    assert not request.stream and not request.ignore_eos
    body = json.loads(full_body(request, "rid", 0, vocab.text(3)))
    assert body["text"] == vocab.text(3) and body["output_ids"] == [0, 1, 2]
    assert body["meta_info"]["completion_tokens"] == 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"sampling_params": {}}, "Either text, input_ids"),
        ({"text": ["a", "b"]}, "only one prompt"),
        (
            {"text": "a", "sampling_params": {"max_new_tokens": -1}},
            "max_new_tokens must be at least 0, got -1.",
        ),
        (
            {"text": "a", "sampling_params": {"max_new_tokens": 2, "min_new_tokens": 3}},
            "min_new_tokens must be in [0, max_new_tokens(2)], got 3.",
        ),
        ({"text": "a", "sampling_params": "x"}, "'sampling_params' must be an object"),
    ],
)
def test_simulator_refuses_as_sglang_does(body: dict[str, Any], message: str) -> None:
    refused = refusal(API, body)
    assert refused.status == 400 and message in refused.message


def test_prompt_of_input_ids_and_default_max_tokens() -> None:
    request = sim_request(API, {"input_ids": [5, 6, 7, 8], "stream": True}, 1, "length")
    assert (request.prompt_tokens, request.max_tokens) == (4, 16)


def test_error_shapes_fail_with_the_servers_message() -> None:
    first = recorded(cumulative=True)[0][6:-2]
    raised = json.dumps({"error": {"message": "The input (9000 tokens) is longer than 8192"}})
    result = decode_events([0, 1], [first, raised.encode()], DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert "longer than 8192" in str(result.error)
    abort = {
        "type": "abort",
        "message": "Request aborted: KV cache full",
        "status_code": 503,
        "err_type": "ServiceUnavailable",
    }
    aborted = json.dumps({"text": " The", "output_ids": [0], "meta_info": meta(1, abort)})
    result = decode_events([0, 1], [first, aborted.encode()], DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert "KV cache full" in str(result.error)


def test_inline_thinking_gives_reasoning_tokens() -> None:
    words = ["<think>", " so", "</think>", " Yes", "."]
    result = decode_reads(API, recorded(cumulative=True, words=words))
    assert result.error is None
    assert result.reasoning_tokens == 3 and result.answer_stamp_ns == 3
    assert result.text == " Yes."


def test_reported_reasoning_tokens_win() -> None:
    events = [
        sse({"text": "<think>", "output_ids": [0], "meta_info": meta(1)}),
        sse(
            {
                "text": "<think> a</think> b",
                "output_ids": [0, 1, 2, 3],
                "meta_info": meta(4, {"type": "length", "length": 4}, reasoning_tokens=3),
            }
        ),
        sse("[DONE]"),
    ]
    result = decode_reads(API, events)
    assert result.error is None and result.text == " b"
    assert result.reasoning_tokens == 3 and result.output_tokens == 4


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (["a", "b"], [(False, "a"), (False, "b")]),
        (["<think>", "x", "</think>", "y"], [(True, ""), (True, ""), (True, ""), (False, "y")]),
        (["a<think>b</think>c"], [(False, "ac")]),
        (["<think>b</think>", ""], [(True, ""), (False, "")]),
    ],
)
def test_inline_thinking_split(texts: list[str], expected: list[tuple[bool, str]]) -> None:
    thinking = InlineThinking()
    assert [thinking.split(text) for text in texts] == expected


def test_each_stream_has_its_own_reader() -> None:
    whole = [json.loads(e[6:-2]) for e in recorded(cumulative=True)[:2]]
    first, second = DIALECT.for_stream(), DIALECT.for_stream()
    assert first.read(whole[0], None).text == " The"
    assert second.read(whole[0], None).text == " The"
    assert first.read(whole[1], None).text == " capital"


def test_whole_text_with_only_the_new_ids_is_not_repeated() -> None:
    """Some SGLang versions send the whole text so far but only the new ``output_ids``."""
    events, whole = [], ""
    for index, piece in enumerate(["Hel", "lo", " wor", "ld"]):
        whole += piece
        finish = {"type": "length", "length": 4} if index == 3 else None
        meta = {
            "id": "r",
            "finish_reason": finish,
            "prompt_tokens": 5,
            "completion_tokens": index + 1,
            "cached_tokens": 0,
        }
        events.append(json.dumps({"text": whole, "output_ids": [100 + index], "meta_info": meta}))
    decoded = decode_events(list(range(1, 6)), [e.encode() for e in events] + [b"[DONE]"], API)
    assert decoded.error is None
    assert decoded.text == "Hello world" and decoded.output_tokens == 4
