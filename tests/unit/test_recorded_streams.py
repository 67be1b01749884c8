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


def recorded(path: Path) -> tuple[dict, Script]:
    meta, *reads = (json.loads(line) for line in path.read_text().splitlines())
    return meta, Script([(read["t"], read["data"].encode("latin-1")) for read in reads])


def test_both_engines_and_both_apis_were_recorded() -> None:
    names = {path.stem for path in STREAMS}
    assert {"vllm-chat", "vllm-completions", "transformers-chat"} <= names


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
    # the tiny model streams one token per chunk and never ends early
    assert timings.output_tokens == meta["max_tokens"]
    assert len(timings.token_stamps) == meta["max_tokens"]
    assert timings.counts_from_usage or not timings.tokens_estimated
    assert timings.prompt_tokens_reported and timings.prompt_tokens_reported > 0
    assert timings.finish_reason == "length"
    assert text
