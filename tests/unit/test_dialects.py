"""Every API of ``tpot_locust.apis``, through the seam alone: the simulator's bytes for a
request of it, split at every read boundary a socket could make, decode to its tokens,
usage and finish; the names, paths and models lists are each one home's."""

from __future__ import annotations

import json

import pytest

from tests.helpers.dialect_streams import decode_reads, simulated_stream
from tpot_locust.apis import API_NAMES, dialect_named, dialects
from tpot_locust.apis.dialect import BodyOptions
from tpot_locust.sim import vocab

HISTORY = [
    {"role": "user", "content": "one two three"},
    {"role": "assistant", "content": "four five"},
    {"role": "user", "content": "six"},
]
TOKENS = 5


def test_every_api_has_its_own_name_and_path() -> None:
    assert [dialect.name for dialect in dialects()] == list(API_NAMES)
    paths = [dialect.path for dialect in dialects()]
    assert len(set(paths)) == len(paths)


def our_stream(api: str, max_tokens: int, finish: str) -> bytes:
    """The body bytes (de-chunked) the simulator writes for our request of ``api``."""
    dialect = dialect_named(api)
    options = BodyOptions(
        model="tpot-sim" if dialect.models_path else None,
        max_tokens=max_tokens,
        ignore_eos=finish == "length",
    )
    completion = max_tokens if finish == "length" else max_tokens - 2
    request, stream = simulated_stream(api, dialect.body(HISTORY, options), completion, finish)
    assert request.max_tokens == max_tokens and request.stream
    assert request.prompt_tokens == 6  # words, however the API sends them
    return stream


@pytest.mark.parametrize("finish", ["length", "stop"])
@pytest.mark.parametrize("api", API_NAMES)
def test_the_simulators_stream_of_every_api_decodes_to_its_tokens(api: str, finish: str) -> None:
    stream = our_stream(api, TOKENS, finish)
    expected = TOKENS if finish == "length" else TOKENS - 2
    for split in range(1, len(stream)):
        decoded = decode_reads(api, [stream[:split], stream[split:]])
        assert decoded.error is None, (split, decoded.error)
        assert sum(decoded.token_counts) == expected == decoded.output_tokens, split
        assert not decoded.tokens_estimated and decoded.finish_reason
        assert decoded.text == vocab.text(expected), split  # the next turn's history


@pytest.mark.parametrize("api", API_NAMES)
def test_every_api_names_its_model_where_its_models_list_names_one(api: str) -> None:
    dialect = dialect_named(api)
    body = dialect.body(HISTORY, BodyOptions(model="model-named-m", max_tokens=3))
    if dialect.models_path is None:
        assert "model-named-m" not in json.dumps(body)
        return
    listing = json.dumps(dialect.sim_models("tpot-sim", 0)).encode()
    assert dialect.first_model(listing) == "tpot-sim"
    assert body.get("model") == "model-named-m"
