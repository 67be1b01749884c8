"""The simulator's parts without a server: request parsing, the encoder, word counts."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.raw_http import request_bytes
from tpot_locust.common.distributions import Fixed
from tpot_locust.sim.chunks import StreamEncoder
from tpot_locust.sim.http import HttpError, RequestReader
from tpot_locust.sim.request import (
    RequestError,
    SimRequest,
    count_words,
    decide_length,
    parse_request,
)


def _request(**fields: Any) -> SimRequest:
    values: dict[str, Any] = dict(
        request_id="r",
        api="chat",
        model='m"odel',
        prompt_tokens=2,
        max_tokens=10,
        min_tokens=0,
        ignore_eos=False,
        stream=True,
        include_usage=True,
        continuous_usage=False,
        arrival_perf_ns=0,
        completion_tokens=3,
        finish_reason="stop",
    )
    values.update(fields)
    return SimRequest(**values)


@pytest.mark.parametrize("continuous", [False, True])
def test_encoder_chunks_are_valid_framed_json(continuous: bool) -> None:
    encoder = StreamEncoder(_request(continuous_usage=continuous), 'id"\\x', 7)
    raw = encoder.opening() + encoder.content(b'\\"q\\u00e9', 1) + encoder.finish()
    chunks = []
    while raw:
        size_line, _, raw = raw.partition(b"\r\n")
        size = int(size_line, 16)
        chunks.append(raw[:size])
        assert raw[size : size + 2] == b"\r\n"
        raw = raw[size + 2 :]
    assert chunks[-1] == b""
    events = [c.decode()[6:-2] for c in chunks[:-1]]
    assert events[-1] == "[DONE]"
    parsed = [json.loads(e) for e in events[:-1]]
    assert all(p["id"] == 'id"\\x' and p["model"] == 'm"odel' for p in parsed)
    assert parsed[1]["choices"][0]["delta"]["content"] == '"qé'
    assert ("usage" in parsed[1]) is continuous
    assert parsed[2]["choices"][0]["finish_reason"] == "stop"


def test_parse_request_and_length() -> None:
    def parse(body: Any, api: Any = "chat") -> SimRequest:
        raw = json.dumps(body).encode()
        return parse_request(
            raw, api, request_id="r", default_model="dm", default_max_tokens=256, arrival_perf_ns=0
        )

    req = parse({"messages": [{"content": "a b"}, {"content": [{"type": "text", "text": "c"}]}]})
    assert (req.prompt_tokens, req.max_tokens, req.model, req.stream) == (3, 256, "dm", False)
    assert parse({"prompt": [1, 2, 3], "max_tokens": 5, "foo": 1}, "completions").prompt_tokens == 3
    for bad in ({"messages": []}, {"messages": [{}], "max_tokens": "x"}, [1]):
        with pytest.raises(RequestError):
            parse(bad)
    with pytest.raises(RequestError):
        parse({"messages": [{}], "max_tokens": 2, "min_tokens": 3})
    with pytest.raises(RequestError) as unknown:  # vLLM answers a misspelt model with 404
        parse({"messages": [{"content": "a"}], "model": "d-m"})
    assert (
        unknown.value.status == 404 and unknown.value.message == "The model `d-m` does not exist."
    )
    assert parse({"messages": [{"content": "a"}], "model": "dm"}).model == "dm"
    rng = random.Random(1)
    req = _request(max_tokens=10, min_tokens=0)
    decide_length(req, Fixed(4), rng)
    assert (req.completion_tokens, req.finish_reason) == (4, "stop")
    req = _request(max_tokens=10, ignore_eos=True)
    decide_length(req, Fixed(4), rng)
    assert (req.completion_tokens, req.finish_reason) == (10, "length")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_request_reader_any_split(cuts: list[int]) -> None:
    stream = request_bytes("POST", "/v1/completions?x=1", {"prompt": "hi"}) + request_bytes(
        "GET", "/health", headers={"Connection": "close"}
    )
    reader, requests, last = RequestReader(), [], 0
    for cut in sorted(c % len(stream) for c in cuts) + [len(stream)]:
        reader.feed(stream[last:cut])
        last = cut
        while (request := reader.next_request()) is not None:
            requests.append(request)
    assert [(r.method, r.path, r.keep_alive) for r in requests] == [
        ("POST", "/v1/completions", True),
        ("GET", "/health", False),
    ]
    assert json.loads(requests[0].body) == {"prompt": "hi"}


def test_request_reader_rejects_malformed() -> None:
    for raw in (b"GET /\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"GET / HTTP/2\r\n\r\n"):
        reader = RequestReader()
        reader.feed(raw)
        with pytest.raises(HttpError):
            reader.next_request()


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=" \t\n\x0b\x0c\r\x1c\x1fabc", min_size=0, max_size=9000))
def test_prompt_word_count_matches_str_split(text: str) -> None:
    """The simulator counts long prompts without building their word list (it held its
    loop 2.3 ms per 16k-word prompt); the count must be exactly ``str.split``'s."""
    assert count_words(text) == len(text.split())
    assert count_words(text + " word" * 2000) == len((text + " word" * 2000).split())


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("sglang", {"text": "a", "stream": True, "sampling_params": {"max_new_tokens": 10**15}}),
        ("tgi", {"inputs": "a", "parameters": {"max_new_tokens": 10**15}}),
        (
            "chat",
            {
                "messages": [{"role": "user", "content": "a"}],
                "max_tokens": 10**9,
                "ignore_eos": True,
            },
        ),
    ],
    ids=["sglang", "tgi", "chat-whole"],
)
def test_a_length_no_answer_can_have_is_refused_before_it_hangs_the_server(
    api: str, body: dict
) -> None:
    with pytest.raises(RequestError):
        parse_request(
            json.dumps(body).encode(),
            api,
            request_id="r",
            default_model="m",
            default_max_tokens=16,
            arrival_perf_ns=0,
        )
