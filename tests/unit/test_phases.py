"""Gaps tagged by burst-window overlap; requests left out by warm-up and cool-down time."""

from __future__ import annotations

import numpy as np
import pytest

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.timings import RequestTimings
from tpot_locust.metrics.causes import PREFILL, CauseTimeline, CauseWindow
from tpot_locust.metrics.interference import format_interference, phase_histogram, phase_summary
from tpot_locust.metrics.metric_set import ClassMetrics
from tpot_locust.metrics.phases import RunClock
from tpot_locust.metrics.recorder import Recorder, phase_metric


def burst_window(timeline: CauseTimeline, window_id: str, start: int, end: int | None) -> None:
    timeline.add(CauseWindow(PREFILL, window_id, start, end, 100.0, burst=True))


def recorded(recorder: Recorder, stamps: list[int]) -> ClassMetrics:
    """One request of one token per event at ``stamps``, recorded; its class's metrics."""
    timings = RequestTimings(
        user_class="c",
        api="chat",
        request_id="r",
        t_intended_ns=stamps[0] - 1,
        t_send_ns=stamps[0] - 1_000_000,
        token_stamps=stamps,
        token_counts=[1] * len(stamps),
        output_tokens=len(stamps),
    )
    recorder.record(timings)
    return recorder.take_interval(final=True).classes["c"]


def test_phase_tagging_by_window_overlap() -> None:
    recorder = Recorder()
    now = stamp_ns()
    stamps = [now + i * 2_000_000 for i in range(10)]
    stamps[6] += 50_000_000  # a 52 ms gap between events 5 and 6
    stamps[7:] = [s + 50_000_000 for s in stamps[7:]]
    # a burst window inside that gap only
    burst_window(recorder.causes, "w", stamps[5] + 10_000_000, stamps[5] + 40_000_000)
    metrics = recorded(recorder, stamps)
    assert metrics.histogram(phase_metric("tpot", "burst")).total_count == 1
    assert phase_histogram(metrics, "tpot", "steady").total_count == 8
    assert metrics.worst_gaps[0]["phase"] == "burst"
    assert metrics.worst_gaps[0]["ms"] == pytest.approx(52, abs=0.01)


def test_warmup_and_cooldown_exclusion_by_time() -> None:
    clock = RunClock(start_wall_ns=0, duration_s=10, warmup_s=2, cooldown_s=1)
    assert clock.excluded(int(1.5e9), int(3e9)) == "warmup"
    assert clock.excluded(int(2.5e9), int(9.5e9)) == "cooldown"
    assert clock.excluded(int(2.5e9), int(8e9)) is None
    windows = CauseTimeline()
    burst_window(windows, "a", 100, None)
    burst_window(windows, "a", 100, 200)
    burst_window(windows, "a", 100, None)  # a late open must not reopen it
    assert windows.tags(np.array([150]), np.array([160])).in_burst.tolist() == [True]
    assert windows.tags(np.array([250]), np.array([260])).in_burst.tolist() == [False]


def test_a_burst_request_that_failed_before_its_first_token_opens_no_window() -> None:
    windows = CauseTimeline()
    burst_window(windows, "ok", 100, None)
    burst_window(windows, "ok", 100, 200)
    burst_window(windows, "refused", 150, None)  # open while the request is in flight
    windows.fail(PREFILL, "refused", burst=True)  # HTTP 400: no prefill ran
    burst_window(windows, "refused", 150, None)  # a late open from another worker
    assert len(windows) == 1 and windows.bursts.failed == 1
    assert windows.bursts.durations_s() == [100 / 1e9]
    assert windows.tags(np.array([300]), np.array([400])).in_burst.tolist() == [False]


def test_a_phase_with_few_samples_marks_its_tail_unmeasured() -> None:
    recorder = Recorder()
    now = stamp_ns()
    gaps = np.random.default_rng(1).integers(1_000_000, 3_000_000, 399)
    stamps = [now, *(now + np.cumsum(gaps)).tolist()]  # 400 events, varied gaps
    burst_window(recorder.causes, "w", stamps[0], stamps[30])  # ~30 gaps
    metrics = recorded(recorder, stamps)
    summary = phase_summary(metrics, tail_min_samples=10)
    assert summary is not None
    burst, steady = summary["phases"]["burst"]["tpot"], summary["phases"]["steady"]["tpot"]
    assert 25 <= burst["count"] <= 35
    assert burst["unmeasured"] == ["p90", "p99", "p99.9"]  # ~3, 0.3, 0.03 samples above
    assert steady["unmeasured"] == ["p99", "p99.9"]  # ~3.7 and 0.4 of ~370
    text = "\n".join(format_interference({"interference": summary}))
    assert "*" in text and "not yet measured" in text
