"""Tokens counted as they arrive, per live stream, at each take."""

from __future__ import annotations

from array import array

from tpot_locust.metrics.token_flow import TokenFlow


def test_token_flow_counts_live_streams_at_each_take() -> None:
    flow = TokenFlow()
    counts = array("q", [1, 1])
    flow.start(1, "chat", counts)
    assert flow.take() == {"chat": 2}
    counts.extend([3, 1])
    assert flow.take() == {"chat": 4}
    counts.append(1)
    flow.end(1)  # the last event arrived after the last take: counted at the next
    assert flow.take() == {"chat": 1}
    assert flow.take() == {}
    flow.start(2, "chat", array("q", [1]))
    flow.end(2, array("q", [1, 1, 1]))  # the final counts replaced the live ones
    assert flow.take() == {"chat": 3}
