"""The simulator's filler (``simulator.filler_bytes``): a non-token event of the size asked
for, which every API's reader reads past, written with every K-th token."""

from __future__ import annotations

from tpot_locust.sim.chunks import filler_chunk
from tpot_locust.wire.ndjson import NDJSONParser
from tpot_locust.wire.sse import SSEParser


def _payload(chunk: bytes) -> bytes:
    size, _, rest = chunk.partition(b"\r\n")
    assert rest.endswith(b"\r\n") and int(size, 16) == len(rest) - 2
    return rest[:-2]


def test_an_sse_filler_is_a_comment_of_the_size_asked() -> None:
    payload = _payload(filler_chunk("sse", 8192))
    assert len(payload) == 8192 and payload.startswith(b": ") and payload.endswith(b"\n\n")
    assert list(SSEParser().feed(payload)) == []


def test_an_ndjson_filler_is_a_blank_line_of_the_size_asked() -> None:
    payload = _payload(filler_chunk("ndjson", 4096))
    assert len(payload) == 4096 and payload.strip() == b""
    assert list(NDJSONParser().feed(payload)) == []
