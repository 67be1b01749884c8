"""Streams of an API's dialect for its unit tests: the simulator's request and bytes for a
body, a recording's body, and reads decoded as the client decodes them (the API's parser,
``feed_read``, the stream decoder)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tpot_locust.sim import vocab
from tpot_locust.sim.chunks import StreamEncoder
from tpot_locust.sim.request import RequestError, SimRequest, parse_request
from tpot_locust.wire.chunked import ChunkedDecoder
from tpot_locust.wire.sse import DEFAULT_MAX_EVENT_BYTES
from tpot_locust.wire.stream_decoder import DecodedStream, StreamDecoder, feed_read
from tpot_locust.wire.streaming import event_parser

CREATED = 1_700_000_000  # the simulator's clock, in seconds, for every encoded stream


def sim_request(
    api: str, body: dict[str, Any], completion: int | None = None, finish: str = "length"
) -> SimRequest:
    """The simulator's request for ``body``: ``completion`` (or all) tokens, then ``finish``."""
    request = parse_request(
        json.dumps(body).encode(),
        api,
        request_id="r",
        default_model="tpot-sim",
        default_max_tokens=16,
        arrival_perf_ns=0,
    )
    request.completion_tokens = request.max_tokens if completion is None else completion
    request.finish_reason = finish
    return request


def refusal(api: str, body: dict[str, Any]) -> RequestError:
    """The error the simulator refuses ``body`` with (the test fails if it takes it)."""
    with pytest.raises(RequestError) as refused:
        sim_request(api, body)
    return refused.value


def simulated_reads(request: SimRequest, response_id: str = "rid") -> list[bytes]:
    """The simulator's chunks for ``request``, de-chunked: one read per chunk that has bytes."""
    encoder = StreamEncoder(request, response_id, CREATED)
    chunks = [encoder.opening()]
    last = request.completion_tokens
    chunks += [encoder.content(vocab.escaped(i - 1), i) for i in range(1, last + 1)]
    chunks.append(encoder.finish())
    decoder = ChunkedDecoder()
    reads = [decoder.feed(chunk) for chunk in chunks]
    assert decoder.done
    return [read for read in reads if read]


def simulated_stream(
    api: str,
    body: dict[str, Any],
    completion: int | None = None,
    finish: str = "length",
    response_id: str = "rid",
) -> tuple[SimRequest, bytes]:
    """The simulator's request for ``body`` (as ``sim_request``) and its de-chunked stream."""
    request = sim_request(api, body, completion, finish)
    return request, b"".join(simulated_reads(request, response_id))


def split_reads(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into reads of ``size`` bytes (the last one shorter)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def recorded_body(path: Path) -> tuple[dict[str, Any], bytes]:
    """A recording's first line (what was asked) and its response's de-chunked body."""
    meta, *reads = (json.loads(line) for line in path.read_text().splitlines())
    raw = b"".join(read["data"].encode("latin-1") for read in reads)
    return meta, ChunkedDecoder().feed(raw.partition(b"\r\n\r\n")[2])


def decode_reads(api: str, reads: list[bytes], fast: bool = True) -> DecodedStream:
    """Each read fed as it would arrive, stamped 0, 1, 2...; the parser's close after."""
    decoder = StreamDecoder(api, fast=fast)
    parser = event_parser(decoder.dialect, DEFAULT_MAX_EVENT_BYTES)
    for stamp, data in enumerate(reads):
        feed_read(parser, decoder, stamp, data)
    if events := parser.close():
        decoder.feed(len(reads), events)
    return decoder.finish()


def decoded_alike(api: str, data: bytes, sizes: Iterable[int]) -> DecodedStream:
    """``data`` cut into reads of each of ``sizes``, decoded fast and in full: one outcome."""
    results: list[DecodedStream] = []
    for size in sizes:
        reads = split_reads(data, size)
        fast, full = decode_reads(api, reads), decode_reads(api, reads, fast=False)
        assert list(fast.token_stamps) == list(full.token_stamps), size  # the cut's stamps
        results += [fast, full]
    outcomes = {_outcome(result) for result in results}
    assert len(outcomes) == 1, outcomes
    return results[0]


def _outcome(result: DecodedStream) -> tuple[Any, ...]:
    """What a stream decoded to, whatever the reads it came in."""
    error = None if result.error is None else (result.error.category, str(result.error))
    return (
        error,
        result.text,
        tuple(result.token_counts),
        result.output_tokens,
        result.prompt_tokens,
        result.cached_prompt_tokens,
        result.finish_reason,
        result.done,
    )


def assert_sim_decoded(result: DecodedStream, request: SimRequest, finish: str) -> None:
    """``result`` holds the simulator's tokens, text and prompt for ``request``, then ``finish``."""
    tokens = request.completion_tokens
    assert result.error is None
    assert len(result.token_stamps) == tokens == result.output_tokens
    assert result.text == vocab.text(tokens) and result.prompt_tokens == request.prompt_tokens
    assert result.finish_reason == finish and result.done


def sse_event(kind: str, **fields: Any) -> bytes:
    """One event as Anthropic and OpenAI write it: named, ``type`` first, then the fields."""
    data = json.dumps({"type": kind, **fields}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


def named_events(stream: bytes) -> tuple[list[str], list[dict[str, Any]]]:
    """A stream of named SSE events (``event:`` then one ``data:`` line): names and JSON."""
    blocks = [block for block in stream.split(b"\n\n") if block]
    names = [block.split(b"\n")[0].removeprefix(b"event: ").decode() for block in blocks]
    return names, [json.loads(block.split(b"\ndata: ")[1]) for block in blocks]
