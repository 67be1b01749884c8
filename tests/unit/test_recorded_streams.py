"""Streams recorded from real engines (``tests/engines/record_streams.py``), replayed with
their own read boundaries and timing through our client: every token counted once, the
server's usage taken, nothing flagged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.scripted_server import Script, request, scripted_server
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import stream_request

STREAMS = sorted((Path(__file__).resolve().parents[1] / "data" / "streams").glob("*.jsonl"))
# The finish of a max-length answer, in each API's words; transformers serve's Responses
# API says only "completed" (it has no incomplete status).
MAX_LENGTH_FINISH = {
    "chat": "length",
    "completions": "length",
    "responses": "max_output_tokens",
    "messages": "max_tokens",
    "transformers-responses": "completed",
}
# A text delta event, as bytes in the recording: the token events to expect where one
# delta may hold more than one token (vLLM's Responses API joined some here), counted
# apart from our client; the OpenAI ones send one token per chunk.
TEXT_DELTA_MARK = {
    "responses": b'"type":"response.output_text.delta"',
    "messages": b'"type":"text_delta"',
}


def recorded(path: Path) -> tuple[dict, Script]:
    meta, *reads = (json.loads(line) for line in path.read_text().splitlines())
    return meta, Script([(read["t"], read["data"].encode("latin-1")) for read in reads])


def test_both_engines_and_every_api_they_serve_were_recorded() -> None:
    names = {path.stem for path in STREAMS}
    assert {
        "vllm-chat",
        "vllm-completions",
        "vllm-responses",
        "vllm-messages",
        "transformers-chat",
        "transformers-responses",
    } <= names


def token_events(meta: dict, script: Script) -> int:
    mark = TEXT_DELTA_MARK.get(meta["api"])
    if mark is None:
        return meta["max_tokens"]
    return sum(data.count(mark) for _, data in script.steps)


@pytest.mark.parametrize("path", STREAMS, ids=lambda p: p.stem)
def test_a_recorded_stream_decodes_to_its_usage(path: Path) -> None:
    meta, script = recorded(path)
    with scripted_server([script]) as url:
        connection = HTTPConnection(Origin.parse(url))
        call = request()
        call = type(call)(**{**call.__dict__, "api": meta["api"], "path": meta["path"]})
        timings, text = stream_request(connection, call)
        connection.close()
    assert timings.ok, timings.error_message
    # the tiny model never ends early; the server's usage counts every token once
    assert timings.output_tokens == meta["max_tokens"]
    assert len(timings.token_stamps) == token_events(meta, script) <= meta["max_tokens"]
    assert timings.counts_from_usage or not timings.tokens_estimated
    assert timings.prompt_tokens_reported and timings.prompt_tokens_reported > 0
    assert timings.finish_reason == MAX_LENGTH_FINISH.get(path.stem, MAX_LENGTH_FINISH[meta["api"]])
    assert text
