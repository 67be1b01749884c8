"""Bulk numpy recording equals hdrhistogram's own record_value, bucket for bucket."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.timings import RequestTimings, to_us
from tpot_locust.metrics.causes import PREFILL, CauseWindow
from tpot_locust.metrics.histograms import (
    HIGHEST_US,
    counts_view,
    decode_histogram,
    histogram_stats,
    new_histogram,
    record_many,
)
from tpot_locust.metrics.recorder import BUCKET_SLICE, Recorder
from tpot_locust.metrics.tail_gaps import TAIL_GAPS_KEPT


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=HIGHEST_US), min_size=1, max_size=300))
def test_bulk_record_matches_record_value(values: list[int]) -> None:
    bulk, reference = new_histogram(), new_histogram()
    record_many(bulk, np.array(values, dtype=np.int64))
    for value in values:
        reference.record_value(value)
    assert np.array_equal(counts_view(bulk), counts_view(reference))
    assert bulk.total_count == reference.total_count
    assert bulk.encode() == reference.encode()


def test_powers_of_two_boundaries() -> None:
    values = [v for k in range(1, 32) for v in (2**k - 1, 2**k, 2**k + 1) if v <= HIGHEST_US]
    bulk, reference = new_histogram(), new_histogram()
    record_many(bulk, np.array(values))
    for value in values:
        reference.record_value(value)
    assert np.array_equal(counts_view(bulk), counts_view(reference))


def test_stats_match_library_percentiles() -> None:
    rng = np.random.default_rng(3)
    values = rng.lognormal(7, 1.2, 20_000).astype(np.int64) + 1
    histogram = new_histogram()
    record_many(histogram, values)
    stats = histogram_stats(histogram)
    for percentile, value in stats.percentiles.items():
        assert value == histogram.get_value_at_percentile(percentile)
    assert abs(stats.mean - histogram.get_mean_value()) < 1e-6 * stats.mean
    assert stats.max == histogram.get_max_value()
    assert stats.count == values.size
    assert stats.above[99.0] == int(np.count_nonzero(values > stats.percentiles[99.0]))


def test_out_of_range_values_are_clamped_and_counted_not_dropped() -> None:
    histogram = new_histogram()
    clamped = record_many(histogram, np.array([-5, 10, HIGHEST_US * 2]))
    assert clamped == 2
    assert histogram.total_count == 3


def test_merge_of_encoded_parts_equals_one_histogram_of_all_values() -> None:
    rng = np.random.default_rng(7)
    parts = [rng.integers(1, 200_000, 5_000) for _ in range(4)]
    whole = new_histogram()
    record_many(whole, np.concatenate(parts))
    merged = new_histogram()
    for part in parts:
        histogram = new_histogram()
        record_many(histogram, part)
        merged.add(decode_histogram(histogram.encode()))
    assert histogram_stats(merged) == histogram_stats(whole)


def test_recorder_batches_lose_nothing() -> None:
    """Through the Recorder (buffered, bucketed in slices with yields): counts and
    percentiles of every metric equal one ``record_value`` per sample, with multi-token
    events too."""
    rng = np.random.default_rng(7)
    recorder = Recorder()
    names = ("tpot", "itl", "ttft", "e2e", "worst_gap", "request_tpot", "read_delay")
    reference = {name: new_histogram() for name in names}
    start = stamp_ns()
    for number in range(30):  # 30 x ~400 gaps: several slices of BUCKET_SLICE values
        gaps = rng.integers(200_000, 40_000_000, size=400)
        stamps = (start + np.concatenate([[0], np.cumsum(gaps)])).tolist()
        counts = [1] * len(stamps)  # every other request: some events carry several tokens
        if number % 2:
            counts = rng.choice([1, 1, 1, 2, 5], size=len(stamps)).tolist()
        timings = RequestTimings(
            user_class="c",
            api="chat",
            request_id=f"r{number}",
            t_intended_ns=start - 1,
            t_send_ns=start - 1_000_000,
            token_stamps=stamps,
            token_counts=counts,
            output_tokens=sum(counts),
            read_delays_ns=rng.integers(0, 3_000_000, size=len(stamps) + 1).tolist(),
        )
        recorder.record(timings)
        samples = {
            "tpot": timings.tpot_ns(),
            "itl": timings.itl_ns(),
            "ttft": [timings.ttft_ns],
            "e2e": [timings.e2e_ns],
            "worst_gap": [max(timings.itl_ns())],
            "request_tpot": [timings.request_tpot_ns],
            "read_delay": timings.read_delays_ns,
        }
        for name, values in samples.items():
            for value in to_us(np.asarray(values)):
                reference[name].record_value(int(value))
    # no cause window overlapped any gap: each is in ``@none`` too (and steady, the rest)
    reference["tpot@none"], reference["itl@none"] = reference["tpot"], reference["itl"]
    metrics = recorder.take_interval(final=True).classes["c"]
    assert reference["tpot"].total_count > 3 * BUCKET_SLICE
    for name, expected in reference.items():
        measured = metrics.histogram(name)
        assert measured.total_count == expected.total_count, name
        assert np.array_equal(counts_view(measured), counts_view(expected)), name
        assert histogram_stats(measured) == histogram_stats(expected)


def test_recorder_keeps_the_largest_gaps_of_the_run() -> None:
    """Each request gives exactly its own worst gap, with its phase and id, and the largest
    of all are kept (one-stamp requests and a burst window included)."""
    rng = np.random.default_rng(11)
    recorder = Recorder()
    start = stamp_ns()
    expected = []
    for number in range(75):
        events = 1 if number % 9 == 0 else int(rng.integers(2, 40))
        gaps = rng.integers(100_000, 9_000_000, size=events - 1)
        stamps = (start + number * 50_000_000 + np.concatenate([[0], np.cumsum(gaps)])).tolist()
        timings = RequestTimings(
            user_class="c",
            api="chat",
            request_id=f"r{number}",
            t_intended_ns=start - 1,
            t_send_ns=start - 1,
            token_stamps=stamps,
            token_counts=[1] * events,
            output_tokens=events,
        )
        recorder.record(timings)
        for at, gap in enumerate(gaps.tolist()):
            end_wall = stamps[at + 1]
            expected.append((round(gap / 1e6, 3), f"r{number}", at, end_wall))
    # a burst window over the worst gap of all
    *_, burst_end = max(expected)
    recorder.causes.add(CauseWindow(PREFILL, "w", burst_end - 1_000, burst_end + 1_000, 9.0, True))
    metrics = recorder.take_interval(final=True).classes["c"]
    kept = sorted(expected, reverse=True)[:TAIL_GAPS_KEPT]  # of 1,300-odd gaps
    assert [g["ms"] for g in metrics.tail_gaps] == [m for m, *_ in kept]
    every = {(m, r, at) for m, r, at, _ in expected}
    assert all((g["ms"], g["request_id"], g["gap"]) in every for g in metrics.tail_gaps)
    assert [g["phase"] for g in metrics.worst_gaps] == ["burst"] + ["steady"] * 9
    assert metrics.worst_gaps[0]["causes"] == ["prefill"]
    assert metrics.worst_gaps[0]["prefill_tokens"] == 9
    assert metrics.histogram("worst_gap").total_count == sum(1 for n in range(75) if n % 9)
