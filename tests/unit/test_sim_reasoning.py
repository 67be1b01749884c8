"""The simulator's reasoning tokens (``--reasoning-tokens``, ``simulator.reasoning_tokens``):
its real pieces (request, length decision, stream encoder) write each API's stream, and the
client's own parser and decoder read it back: R reasoning tokens, then the answer, whose
first token is event R (counted from 0); usage says R where the API has a count."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.dialect_streams import CREATED, named_events
from tpot_locust.apis import API_NAMES, dialect_named
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.cli.embedded_simulator import simulator_args
from tpot_locust.common.distributions import Fixed, LogNormal, Uniform, sample_int
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.yaml_source import ScenarioError
from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import StreamEncoder, full_body
from tpot_locust.sim.cli import build_arg_parser, config_from_args
from tpot_locust.sim.request import SimRequest, decide_length, parse_request
from tpot_locust.sim.vocab import ESCAPED
from tpot_locust.wire.chunked import ChunkedDecoder
from tpot_locust.wire.sse import DEFAULT_MAX_EVENT_BYTES
from tpot_locust.wire.stream_decoder import DecodedStream, StreamDecoder, feed_read
from tpot_locust.wire.streaming import event_parser

pytestmark = pytest.mark.unit

HISTORY = [{"role": "user", "content": "one two three"}]
REASONING_APIS = [api for api in API_NAMES if dialect_named(api).sim_reasoning]
GAP_NS = 1_000_000  # each event's stamp: its index, in ms


def reasoning_request(api: str, max_tokens: int, reasoning: int) -> SimRequest:
    """Our client's request of ``api`` as the simulator takes it, its length decided as the
    server decides it (exactly ``max_tokens``: ignore_eos where the API has it)."""
    dialect = dialect_named(api)
    options = BodyOptions(model="tpot-sim" if dialect.models_path else None, max_tokens=max_tokens)
    body = json.dumps(dialect.body(HISTORY, options)).encode()
    request = parse_request(
        body,
        api,
        request_id="r",
        default_model="tpot-sim",
        default_max_tokens=16,
        arrival_perf_ns=0,
    )
    request.ignore_eos = True  # the APIs without it: the length still decided exactly
    decide_length(request, Fixed(1), random.Random(0), reasoning)
    return request


def token_reads(request: SimRequest, response_id: str = "resp_abc") -> list[bytes]:
    """The simulator's writes, one per token event as ``Response._token_chunk`` makes them
    (the opening before the first, the closing after the last), de-chunked."""
    encoder = StreamEncoder(request, response_id, CREATED)
    total = request.completion_tokens
    writes = []
    for index in range(1, total + 1):
        chunk = encoder.content(ESCAPED[(index - 1) % len(ESCAPED)], index)
        chunk = encoder.opening() + chunk if index == 1 else chunk
        writes.append(chunk + encoder.finish() if index == total else chunk)
    decoder = ChunkedDecoder()
    reads = [decoder.feed(write) for write in writes]
    assert decoder.done
    return reads


def decoded(api: str, reads: list[bytes], fast: bool = True) -> DecodedStream:
    """Each read as the client reads it (the API's parser, ``feed_read``), read i stamped
    i ms."""
    decoder = StreamDecoder(api, fast=fast)
    parser = event_parser(decoder.dialect, DEFAULT_MAX_EVENT_BYTES)
    for index, data in enumerate(reads):
        feed_read(parser, decoder, index * GAP_NS, data)
    if events := parser.close():
        decoder.feed(len(reads) * GAP_NS, events)
    return decoder.finish()


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("api", REASONING_APIS)
def test_reasoning_tokens_come_first_and_the_answer_at_event_r(api: str, fast: bool) -> None:
    request = reasoning_request(api, max_tokens=9, reasoning=4)
    assert (request.completion_tokens, request.reasoning_tokens) == (9, 4)
    result = decoded(api, token_reads(request), fast)
    assert result.error is None and result.done
    assert result.reasoning_tokens == 4
    assert list(result.token_stamps) == [i * GAP_NS for i in range(9)]  # one token an event
    assert result.answer_stamp_ns == 4 * GAP_NS  # event R: the first answer token
    assert result.output_tokens == 9
    assert result.text == vocab.text(9, 4)  # the answer alone: the next turn's history


@pytest.mark.parametrize("api", REASONING_APIS)
def test_a_reasoning_stream_decodes_alike_whatever_the_reads(api: str) -> None:
    request = reasoning_request(api, max_tokens=5, reasoning=2)
    stream = b"".join(token_reads(request))
    for split in range(1, len(stream)):
        result = decoded(api, [stream[:split], stream[split:]])
        assert result.error is None, (split, result.error)
        assert result.reasoning_tokens == 2 and result.output_tokens == 5, split
        assert result.text == vocab.text(5, 2), split


def test_chat_streams_vllms_reasoning_content_and_usage_says_r() -> None:
    request = reasoning_request("chat", max_tokens=6, reasoning=3)
    assert request.include_usage
    events = [
        json.loads(block.removeprefix(b"data: "))
        for block in b"".join(token_reads(request)).split(b"\n\n")
        if block and block != b"data: [DONE]"
    ]
    deltas = [event["choices"][0]["delta"] for event in events if event["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert deltas[1:4] == [{"reasoning_content": vocab.word(i)} for i in range(3)]
    assert deltas[4:7] == [{"content": vocab.word(i)} for i in range(3, 6)]
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 6
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_without_reasoning_the_streams_are_as_before() -> None:
    request = reasoning_request("chat", max_tokens=4, reasoning=0)
    stream = b"".join(token_reads(request))
    assert b"reasoning" not in stream and b"completion_tokens_details" not in stream
    result = decoded("chat", token_reads(request))
    assert result.reasoning_tokens == 0 and result.answer_stamp_ns == 0


def test_responses_numbers_every_event_in_order_around_the_reasoning_item() -> None:
    request = reasoning_request("responses", max_tokens=5, reasoning=2)
    names, events = named_events(b"".join(token_reads(request)))
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert names[2:4] == ["response.output_item.added", "response.reasoning_part.added"]
    assert names[4:6] == ["response.reasoning_text.delta"] * 2
    assert names[6:11] == [
        "response.reasoning_text.done",
        "response.reasoning_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[11:14] == ["response.output_text.delta"] * 3
    assert {event["output_index"] for event in events[11:14]} == {1}
    response = events[-1]["response"]
    assert [item["type"] for item in response["output"]] == ["reasoning", "message"]
    assert response["output"][0]["content"][0]["text"] == vocab.text(2)
    assert response["usage"]["output_tokens_details"] == {"reasoning_tokens": 2}


def test_messages_think_in_block_0_and_answer_in_block_1() -> None:
    request = reasoning_request("messages", max_tokens=4, reasoning=2)
    names, events = named_events(b"".join(token_reads(request)))
    blocks = [
        (event.get("index"), event.get("delta", {}).get("type"))
        for event in events
        if event["type"].startswith("content_block")
    ]
    assert blocks == [
        (0, None),
        (0, "thinking_delta"),
        (0, "thinking_delta"),
        (0, "signature_delta"),
        (0, None),
        (1, None),
        (1, "text_delta"),
        (1, "text_delta"),
        (1, None),
    ]
    assert events[1]["content_block"]["type"] == "thinking"


@pytest.mark.parametrize("api", ["tgi", "sglang"])
def test_the_native_apis_think_inline_between_tags(api: str) -> None:
    request = reasoning_request(api, max_tokens=4, reasoning=2)
    stream = b"".join(token_reads(request)).decode()
    assert stream.count("<think>") == 1 + (api == "tgi")  # TGI's generated_text repeats it
    assert "<think> the" in stream and "</think> brown" in stream


def test_a_whole_chat_answer_holds_its_reasoning_apart() -> None:
    request = reasoning_request("chat", max_tokens=5, reasoning=2)
    request.stream = False
    body = json.loads(full_body(request, "chatcmpl-1", CREATED))
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] == vocab.text(2)
    assert message["content"] == vocab.text(5, 2)
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_reasoning_is_capped_so_one_answer_token_follows() -> None:
    request = reasoning_request("chat", max_tokens=5, reasoning=100)
    assert (request.completion_tokens, request.reasoning_tokens) == (5, 4)
    one = reasoning_request("chat", max_tokens=1, reasoning=100)
    assert (one.completion_tokens, one.reasoning_tokens) == (1, 0)


def test_without_ignore_eos_the_natural_length_is_the_answers() -> None:
    request = reasoning_request("chat", max_tokens=100, reasoning=0)
    request.ignore_eos, request.min_tokens = False, 0
    decide_length(request, Fixed(10), random.Random(0), 30)
    assert (request.completion_tokens, request.reasoning_tokens) == (40, 30)
    assert request.finish_reason == "stop"
    decide_length(request, Fixed(80), random.Random(0), 30)  # cut at max_tokens
    assert (request.completion_tokens, request.reasoning_tokens) == (100, 30)
    assert request.finish_reason == "length"


def test_no_reasoning_leaves_the_natural_draws_as_they_were() -> None:
    natural = LogNormal(400.0, 200.0)
    request = reasoning_request("chat", max_tokens=10_000, reasoning=0)
    request.ignore_eos, request.min_tokens = False, 0
    rng, reference = random.Random(7), random.Random(7)
    for _ in range(20):
        decide_length(request, natural, rng)
        assert request.completion_tokens == sample_int(natural, reference, minimum=1)
        assert request.reasoning_tokens == 0


def test_the_reasoning_flag_takes_a_number_or_a_distribution() -> None:
    parser = build_arg_parser()
    assert config_from_args(parser.parse_args([])).reasoning_tokens is None
    assert config_from_args(parser.parse_args(["--reasoning-tokens", "0"])).reasoning_tokens is None
    fixed = config_from_args(parser.parse_args(["--reasoning-tokens", "100"]))
    assert fixed.reasoning_tokens == Fixed(100.0)
    spec = '{"dist": "uniform", "min": 0, "max": 50}'
    uniform = config_from_args(parser.parse_args(["--reasoning-tokens", spec]))
    assert uniform.reasoning_tokens == Uniform(0.0, 50.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--reasoning-tokens", "-3"])


def scenario_file(tmp_path: Path, api: str = "chat", simulator: str = "{}") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: r\nduration: 5s\nserver: {{api: {api}}}\n"
        f"classes: {{c: {{users: 1}}}}\nsimulator: {simulator}\n"
    )
    return path


def flag_value(args: list[str], flag: str) -> Any:
    return json.loads(args[args.index(flag) + 1]) if flag in args else None


def test_the_scenario_key_becomes_the_simulator_flag(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    assert flag_value(simulator_args(load_scenario(path)), "--reasoning-tokens") is None
    set_100 = load_scenario(path, ["simulator.reasoning_tokens=100"])
    assert flag_value(simulator_args(set_100), "--reasoning-tokens") == 100
    spec = "{dist: uniform, min: 10, max: 20}"
    uniform = load_scenario(scenario_file(tmp_path, simulator=f"{{reasoning_tokens: {spec}}}"))
    assert flag_value(simulator_args(uniform), "--reasoning-tokens") == {
        "dist": "uniform",
        "min": 10,
        "max": 20,
    }
    # and the simulator takes what the scenario gives it
    args = build_arg_parser().parse_args(simulator_args(uniform))
    assert config_from_args(args).reasoning_tokens == Uniform(10.0, 20.0)


@pytest.mark.parametrize("value", ["-1", "true", "{dist: nope}"])
def test_the_scenario_refuses_a_bad_reasoning_length(tmp_path: Path, value: str) -> None:
    with pytest.raises(ScenarioError, match="reasoning_tokens"):
        load_scenario(scenario_file(tmp_path, simulator=f"{{reasoning_tokens: {value}}}"))


def test_the_scenario_refuses_reasoning_where_the_api_cannot_carry_it(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, api="completions", simulator="{reasoning_tokens: 10}")
    with pytest.raises(ScenarioError, match="completions API .* has no reasoning form"):
        load_scenario(path)
    load_scenario(scenario_file(tmp_path, api="completions", simulator="{reasoning_tokens: 0}"))
    assert REASONING_APIS == ["chat", "responses", "messages", "tgi", "sglang", "ollama"]


@pytest.mark.parametrize("reasoning", [0, 3])
@pytest.mark.parametrize("api", API_NAMES)
def test_the_plain_splice_is_the_encoders_chunk_wherever_it_is_used(
    api: str, reasoning: int
) -> None:
    """``Response._token_chunk`` splices a token itself inside ``StreamEncoder.plain``'s
    range (the hot path): there it must be byte for byte what ``content`` writes."""
    if reasoning and not dialect_named(api).sim_reasoning:
        pytest.skip("no reasoning in this API")
    request = reasoning_request(api, 9, reasoning)
    plain, reference = StreamEncoder(request, "id", CREATED), StreamEncoder(request, "id", CREATED)
    lo, hi, chunk = plain.plain()
    used = 0
    for index in range(1, request.completion_tokens + 1):
        token = ESCAPED[(index - 1) % len(ESCAPED)]
        expected = reference.content(token, index)
        if lo < index < hi and index > 1:
            assert chunk(token) == expected, index
            used += 1
    assert used or lo == hi  # a text-only template uses it for most tokens
