"""The worker delta format is versioned: a master refuses a delta of another version with a
message naming both, instead of merging it wrong."""

from __future__ import annotations

import pytest

from tpot_locust.common.version import __version__
from tpot_locust.harness.run.worker_deltas import (
    DELTA_FORMAT,
    DeltaFormatError,
    pack_delta,
    unpack_delta,
)
from tpot_locust.metrics.metric_set import ClassCounters, MetricSet


def delta_with(ok: int) -> MetricSet:
    delta = MetricSet()
    delta.for_group("chat").counters.ok = ok
    return delta


def test_a_delta_of_this_version_round_trips() -> None:
    packed = pack_delta(delta_with(3))
    assert packed["format"] == DELTA_FORMAT and packed["version"] == __version__
    assert unpack_delta("w1", packed).to_metric_set().classes["chat"].counters.ok == 3


def test_an_older_or_newer_worker_is_refused_with_both_versions() -> None:
    old = delta_with(1).encode()  # the first form: the encoded set itself, no format
    with pytest.raises(DeltaFormatError) as older:
        unpack_delta("w1", old)
    message = str(older.value)
    assert "worker w1" in message and "delta format 1" in message
    assert f"{__version__} (delta format {DELTA_FORMAT})" in message
    newer = pack_delta(delta_with(1)) | {"format": DELTA_FORMAT + 1, "version": "9.0.0"}
    with pytest.raises(DeltaFormatError, match=rf"9\.0\.0 \(delta format {DELTA_FORMAT + 1}\)"):
        unpack_delta("w2", newer)


def test_counters_merge_by_their_fields_and_unknown_ones_are_ignored() -> None:
    total = ClassCounters()
    total.add(ClassCounters(ok=2, good=1, arrived_tokens=10))
    total.add(ClassCounters.from_dict(ClassCounters(ok=1).to_dict() | {"from_the_future": 5}))
    assert (total.ok, total.good, total.arrived_tokens) == (3, 1, 10)


def test_a_largest_of_counter_merges_as_the_largest() -> None:
    total = ClassCounters()
    total.add(ClassCounters(prompt_difference_max=7, prompt_compared_requests=2))
    total.add(ClassCounters(prompt_difference_max=3, prompt_compared_requests=1))
    assert (total.prompt_difference_max, total.prompt_compared_requests) == (7, 3)
