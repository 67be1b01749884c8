"""Ollama's ``/api/chat`` dialect: a recorded-format NDJSON stream, the simulator's own
bytes, its error line and thinking, through the NDJSON parser and the stream decoder."""

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
    split_reads,
)
from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.apis.ollama import DIALECT
from tpot_locust.common.errors import MODEL_LOOKUP, STREAM_ERROR_EVENT, StreamError
from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import StreamEncoder, full_body
from tpot_locust.wire.stream_decoder import StreamDecoder, decode_events

API = DIALECT.name


def line(content: str = "", done: bool = False, nanos: int = 0, **more: Any) -> bytes:
    """One line as Go's encoder writes it (api.ChatResponse: fields in struct order)."""
    message = {"role": "assistant", "content": content}
    if "thinking" in more:
        message["thinking"] = more.pop("thinking")
    event = {
        "model": "llama3.2",
        "created_at": f"2025-08-04T08:52:19.{385406455 + nanos}Z",
        "message": message,
        "done": done,
        **more,
    }
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


LAST = dict(
    done_reason="stop",
    total_duration=4883583458,
    load_duration=1334875,
    prompt_eval_count=26,
    prompt_eval_duration=342546000,
    eval_count=4,
    eval_duration=4535599000,
)
RECORDED = [
    line(" The", nanos=1),
    line(" sky", nanos=2),
    line(" is", nanos=3),
    line(" blue", nanos=4),
    line("", done=True, nanos=5, **LAST),
]


@pytest.mark.parametrize("fast", [True, False])
def test_recorded_stream_read_by_read(fast: bool) -> None:
    result = decode_reads(API, RECORDED, fast)
    assert result.error is None
    assert list(result.token_stamps) == [0, 1, 2, 3] and list(result.token_counts) == [1] * 4
    assert result.text == " The sky is blue"
    assert (result.output_tokens, result.prompt_tokens) == (4, 26)
    assert result.finish_reason == "stop" and result.done


def test_recorded_stream_split_anywhere() -> None:
    whole = b"".join(RECORDED)
    result = decode_reads(API, split_reads(whole, 11))
    assert result.error is None and result.text == " The sky is blue"
    assert result.output_tokens == 4 and result.finish_reason == "stop"


def test_fast_path_equals_full_decoding_with_quotes_and_escapes() -> None:
    reads = [
        line('say "hi"'),
        line("a\\"),
        line("<b>"),
        line("\\n"),
        line("x"),
        line("x"),
        line("", True, **LAST),
    ]
    fast, full = decode_reads(API, reads, True), decode_reads(API, reads, False)
    learned = StreamDecoder(DIALECT)
    learned.feed(0, [reads[-2][:-1]])
    assert learned._prefix is not None  # plain lines take the byte scan, then the template
    assert fast.text == full.text == 'say "hi"a\\<b>\\nxx'
    assert fast.token_stamps == full.token_stamps and fast.output_tokens == full.output_tokens


def test_old_ollama_without_done_reason_still_finishes() -> None:
    result = decode_reads(API, [line(" a"), line("", done=True, eval_count=1)])
    assert result.error is None and result.finish_reason == "done"


def test_body_and_models_list() -> None:
    history = [{"role": "user", "content": "hi"}]
    body = DIALECT.body(history, BodyOptions(model="llama3.2", max_tokens=9))
    assert body == {
        "model": "llama3.2",
        "messages": history,
        "stream": True,
        "options": {"num_predict": 9},
    }
    tags = {
        "models": [
            {
                "name": "llama3.2:latest",
                "model": "llama3.2:latest",
                "modified_at": "2025-05-04T17:37:44.706015396-07:00",
                "size": 2019393189,
                "digest": "a80c4f17acd5",
                "details": {"format": "gguf"},
            }
        ]
    }
    assert DIALECT.first_model(json.dumps(tags).encode()) == "llama3.2:latest"
    for bad in (b"{}", b'{"models": []}', b'{"models": [{"size": 1}]}', b"[1]"):
        with pytest.raises(StreamError) as failed:
            DIALECT.first_model(bad)
        assert failed.value.category == MODEL_LOOKUP
    listing = DIALECT.sim_models("tpot-sim", 1_700_000_000)
    assert DIALECT.first_model(json.dumps(listing).encode()) == "tpot-sim"
    assert listing["models"][0]["model"] == "tpot-sim"
    assert (DIALECT.models_path, dialect_named("ollama")) == ("/api/tags", DIALECT)


@pytest.mark.parametrize(("finish", "completion"), [("length", 6), ("stop", 4)])
def test_simulator_stream_decodes_to_its_tokens(finish: str, completion: int) -> None:
    history = [{"role": "user", "content": "one two three"}]
    body = DIALECT.body(history, BodyOptions("tpot-sim", 6))
    request = sim_request(API, body, completion, finish)
    assert (request.prompt_tokens, request.max_tokens, request.stream) == (3, 6, True)
    assert StreamEncoder(request, "rid", 0).media_type == "application/x-ndjson"
    reads = simulated_reads(request)
    assert_sim_decoded(decode_reads(API, reads), request, finish)
    lines = [json.loads(raw) for raw in b"".join(reads).split(b"\n") if raw]  # one a line
    assert len(lines) == completion + 1
    assert list(lines[0]) == ["model", "created_at", "message", "done"]
    assert lines[0]["created_at"] == "2023-11-14T22:13:20Z"
    assert list(lines[-1]) == [
        "model",
        "created_at",
        "message",
        "done",
        "done_reason",
        "prompt_eval_count",
        "eval_count",
    ]
    assert lines[-1]["message"] == {"role": "assistant", "content": ""}


def test_simulator_whole_answer_and_defaults() -> None:
    request = sim_request(
        API, {"model": "tpot-sim:latest", "messages": [{"content": "a b"}], "stream": False}, 3
    )
    assert (request.stream, request.max_tokens) == (False, 16)
    body = json.loads(full_body(request, "rid", 0, vocab.text(3)))
    assert body["message"]["content"] == vocab.text(3) and body["done"] is True
    assert (body["done_reason"], body["eval_count"], body["prompt_eval_count"]) == ("length", 3, 2)
    streamed = sim_request(
        API, {"model": "tpot-sim", "messages": [{"content": "a"}], "options": {"num_predict": -1}}
    )
    assert streamed.stream and streamed.max_tokens == 16  # -1: no limit, the default here
    assert (
        sim_request(
            API,
            {"model": "tpot-sim", "messages": [{"content": "a"}], "options": {"num_predict": 7.0}},
        ).max_tokens
        == 7
    )


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"messages": [{"content": "a"}]}, 400, "model is required"),
        ({"model": "tpot-sim", "messages": []}, 400, "'messages' must be a non-empty list"),
        (
            {"model": "tpot-sim", "messages": [{"content": "a"}], "stream": "yes"},
            400,
            "cannot unmarshal string into Go struct field ChatRequest.stream of type bool",
        ),
        (
            {"model": "tpot-sim", "messages": [{"content": "a"}], "options": {"num_predict": "9"}},
            400,
            'option "num_predict" must be of type integer',
        ),
        ({"model": "other", "messages": [{"content": "a"}]}, 404, "other"),
    ],
)
def test_simulator_refuses(body: dict[str, Any], status: int, message: str) -> None:
    refused = refusal(API, body)
    assert refused.status == status and message in refused.message


def test_error_line_fails_with_the_servers_message() -> None:
    error = b'{"error":"an error was encountered while running the model: unexpected EOF"}'
    result = decode_events([0, 1], [RECORDED[0][:-1], error], DIALECT)
    assert result.error is not None and result.error.category == STREAM_ERROR_EVENT
    assert "unexpected EOF" in str(result.error)


def test_thinking_lines_give_reasoning_tokens() -> None:
    reads = [
        line(thinking="Let"),
        line(thinking=" me"),
        line(thinking=" see"),
        line(" Yes"),
        line("", done=True, **{**LAST, "eval_count": 4}),
    ]
    for fast in (True, False):
        result = decode_reads(API, reads, fast)
        assert result.error is None
        assert result.reasoning_tokens == 3 and result.answer_stamp_ns == 3
        assert result.text == " Yes" and result.output_tokens == 4


def test_tool_call_line_is_a_token_event() -> None:
    call = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    event = json.loads(line())
    event["message"]["tool_calls"] = [call]
    reading = DIALECT.read(event, None)
    assert reading.tokens and not reading.reasoning and reading.text == ""
