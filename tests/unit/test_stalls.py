"""The stall detector's parts: windows, the probe, tagging in the recorder, merging."""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path

import gevent
import numpy as np
from gevent import monkey

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.timings import RequestTimings
from tpot_locust.harness.watch.loop_probe import LagProbe
from tpot_locust.metrics.collector import Collector
from tpot_locust.metrics.histograms import count_above, histogram_stats, new_histogram, record_many
from tpot_locust.metrics.histograms import without as histogram_without
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.metrics.stalls import ClientHealth, StallWindows
from tpot_locust.report.summary import build_summary
from tpot_locust.report.terminal_report import format_report
from tpot_locust.report.truth_check import truth_check


def test_windows_mark_exactly_the_overlapping_gaps() -> None:
    windows = StallWindows()
    windows.add(100, 200)
    windows.add(500, 520)
    starts = np.array([0, 90, 150, 199, 200, 300, 510, 519, 600], dtype=np.int64)
    ends = np.array([90, 110, 160, 400, 210, 499, 515, 700, 700], dtype=np.int64)
    mask = windows.overlaps(starts, ends)
    brute = np.array(
        [
            any(s < e2 and e > s2 for s2, e2 in [(100, 200), (500, 520)])
            for s, e in zip(starts, ends, strict=True)
        ]
    )
    assert mask.tolist() == brute.tolist()
    assert not StallWindows().overlaps(starts, ends).any()


def test_probe_sees_a_held_loop() -> None:
    seen: list[tuple[int, int]] = []
    probe = LagProbe(threshold_ms=5)
    probe.start(lambda start, end: seen.append((start, end)))
    try:
        gevent.sleep(0.02)
        monkey.get_original("time", "sleep")(0.03)  # hold the loop 30 ms
        gevent.sleep(0.02)
    finally:
        probe.stop()
    assert len(seen) == 1
    start, end = seen[0]
    assert 30e6 <= end - start < 60e6
    taken, watched_ns, cpu_ns = probe.take_lags()
    lags = np.asarray(taken)
    assert lags.max() >= 28e6 and lags.size >= 20
    assert 60e6 <= watched_ns < 1e9  # the ~70 ms it ran, to its last tick (1 ms apart)
    assert 0 < cpu_ns < 1e9  # the process's CPU while it watched, to its stop


def test_probe_takes_the_cpu_its_process_spent_while_it_watched() -> None:
    probe = LagProbe()
    assert probe.take_lags()[2] == 0  # none before it starts
    probe.start(lambda start, end: None)
    try:
        spin_until = time.process_time_ns() + 50_000_000
        while time.process_time_ns() < spin_until:  # 50 ms of this process's CPU
            pass
        wall_start = stamp_ns()
        _, _, spent_ns = probe.take_lags()
        gevent.sleep(0.02)
        spin_until = time.process_time_ns() + 20_000_000
        while time.process_time_ns() < spin_until:
            pass
    finally:
        probe.stop()
    assert 50e6 <= spent_ns < 50e6 + 1e9
    _, _, after_ns = probe.take_lags()  # to the stop, though taken after it
    assert 20e6 <= after_ns <= stamp_ns() - wall_start + 5e6
    assert probe.take_lags()[2] == 0  # stopped: nothing more


def _timings(request_id: str, send: int, stamps: list[int]) -> RequestTimings:
    timings = RequestTimings("chat", "chat", request_id, send, send)
    timings.token_stamps.extend(stamps)
    timings.token_counts.extend([1] * len(stamps))
    timings.output_tokens = len(stamps)
    return timings


def test_recorder_sets_aside_the_gaps_across_a_stall() -> None:
    recorder = Recorder()
    base = stamp_ns()
    ms = 1_000_000
    # a stall from 50 to 90 ms: the events sent at 70 and 80 were read together when the loop
    # ran again, both with the kernel's stamp of the newest (88)
    recorder.on_stall(base + 50 * ms, base + 90 * ms)
    recorder.record(
        _timings(
            "a",
            base,
            [base + 10 * ms + i * 10 * ms for i in range(5)]
            + [base + 88 * ms, base + 88 * ms, base + 100 * ms],
        )
    )
    recorder.record(_timings("b", base + 150 * ms, [base + 200 * ms, base + 203 * ms]))  # after
    delta = recorder.take_interval(final=True)
    metrics = delta.classes["chat"]
    itl = metrics.histograms["itl"]
    tagged = metrics.histograms["itl@client_stall"]
    # tagged: the 38 ms gap, the zero one and the one that began inside the window
    assert itl.total_count == 8 and tagged.total_count == 3
    assert histogram_stats(tagged, ()).max // 1000 == 38
    clean = histogram_stats(histogram_without(itl, tagged), ())
    assert clean.count == 5 and clean.max < 11_000
    assert "ttft@client_stall" not in metrics.histograms  # a's ended before, b's began after
    assert metrics.histograms["e2e@client_stall"].total_count == 1  # request a spans it
    assert metrics.histograms["worst_gap@client_stall"].total_count == 1
    assert metrics.counters.shared_stamp_events == 1
    assert metrics.counters.multi_event_reads == 1
    assert delta.client.stalls == 1
    assert {round(g["ms"]) for g in metrics.tail_gaps if g["client_stall"]} == {38, 12, 0}
    assert metrics.worst_gaps[0]["causes"] == ["client_stall"]
    summary = build_summary(delta, RunFacts(start_wall_s=time.time(), stall_threshold_ms=2.0))
    assert summary["metrics"]["itl"]["client_stall"]["count"] == 3
    assert summary["client"]["stalls"] == 1
    report = format_report(summary)
    assert "! client stalls" in report and " in stalls: the client's tail" in report
    assert max(len(line) for line in report.splitlines()) <= 100  # readable in 100 columns


def test_client_health_merges_and_survives_encoding() -> None:
    one, two = ClientHealth(), ClientHealth()
    one.record_lags(array("q", [100_000, 2_000_000]), watched_ns=100_000_000, cpu_ns=70_000_000)
    one.note_stall(0, 30_000_000)
    two.record_lags(array("q", []), watched_ns=250_000_000, cpu_ns=5)
    two.note_stall(10**9, 10**9 + 5_000_000)
    two.name_worker("w2")
    merged = MetricSet()
    for health in (one, two):
        part = MetricSet()
        part.client = health
        merged.add(MetricSet.decode(json.loads(json.dumps(part.encode()))))
    assert merged.client.stalls == 2
    assert merged.client.stalled_ns == 35_000_000
    assert [s["ms"] for s in merged.client.worst_stalls] == [30.0, 5.0]
    assert merged.client.worst_stalls[1]["worker"] == "w2"
    assert merged.client.loop_lag.total_count == 2
    assert merged.client.watched_ns == 350_000_000
    assert merged.client.cpu_ns == 70_000_005  # every process's CPU, exactly
    assert merged.client.held_share == 0.1  # every process's stalls over every one's time
    assert not merged.client.saturated and ClientHealth().held_share is None


def test_older_saved_histograms_still_decode() -> None:
    metric_set = MetricSet()
    record_many(metric_set.for_group("chat").histogram("tpot"), np.array([5, 7]))
    older = metric_set.encode()["classes"]  # results saved before the client section
    assert MetricSet.decode(older).classes["chat"].histogram("tpot").total_count == 2


def test_count_above_and_without_agree_with_the_whole() -> None:
    whole, part = new_histogram(), new_histogram()
    values = np.arange(1, 5001, dtype=np.int64)
    record_many(whole, values)
    record_many(part, values[values % 7 == 0])
    stats = histogram_stats(whole)
    rest = histogram_stats(histogram_without(whole, part))
    assert rest.count == whole.total_count - part.total_count
    p99 = stats.percentiles[99.0]
    assert count_above(whole, p99) == stats.above[99.0]
    assert count_above(part, p99) == np.count_nonzero(values[values % 7 == 0] > p99)


def test_truth_check_compares_every_figure(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    lines = []
    for index in range(50):
        sends = [10**9 + index * 10**7 + 20 * 10**6 + k * 2 * 10**6 for k in range(101)]
        lines.append(
            {
                "request_id": f"r{index}",
                "arrival_ns": 10**9 + index * 10**7,
                "send_ns": sends,
                "tokens": [1] * 101,
                "aborted": False,
            }
        )
    lines.append(
        {
            "request_id": "cut",
            "arrival_ns": 0,
            "send_ns": [1, 99],
            "tokens": [1, 1],
            "aborted": True,
        }
    )
    lines.append({"type": "engine"})
    truth.write_text("".join(json.dumps(line) + "\n" for line in lines))
    figures = {"p50": 2.0, "p90": 2.0, "p99": 2.0, "p99.9": 2.0, "p99.99": 2.0, "max": 2.0}
    summary = {
        "metrics": {
            "tpot": {"count": 5000, **figures},
            "itl": {"count": 5000, **figures, "max": 4.5},
            "ttft": {"count": 50, **dict.fromkeys(figures, 20.1)},
        },
        "run": NO_FACTS,
    }
    check = truth_check(summary, truth, tolerance_ms=1.0)
    # the aborted request's gap counts too: the window is in token time (no window given)
    assert check["metrics"]["tpot"]["count"] == {"measured": 5000, "true": 5001}
    assert check["coverage"] == {"measured": 5000, "true": 5001, "share": 0.9998, "agrees": True}
    assert check["metrics"]["tpot"]["p99.99"]["error"] == 0
    assert abs(check["metrics"]["ttft"]["p50"]["error"] - 0.1) < 1e-9
    assert check["metrics"]["itl"]["max"]["error"] == 2.5
    assert check["passed"] is False and check["worst_error_ms"] == 2.5
    assert truth_check(summary, truth)["passed"] is None


def test_collector_keeps_every_delta_of_an_interval() -> None:
    """The interval's first delta is adopted as it is (no copy on a local run's tick); the
    ones after it, even with loop lag only, must still add up."""
    collector = Collector()
    for lags in ([1000, 2000], [3000], [4000]):
        delta = MetricSet()
        delta.client.record_lags(array("q", lags))
        collector.add_delta(delta)
    collector.tick(users=0)
    collector.add_delta(MetricSet())
    collector.tick(users=0)
    assert collector.totals.client.loop_lag.total_count == 4
    assert len(collector.timeseries) == 2


def test_a_short_last_interval_has_no_extrapolated_rate() -> None:
    collector = Collector()
    collector.start(None)
    collector.tick(users=1)
    collector.tick(users=1, final=True)  # at once: a few ms long
    last = collector.timeseries[-1]
    assert last["partial"] is True and last["tokens_per_s"] is None
    assert "partial" not in collector.timeseries[0]


def test_a_stall_while_the_collector_ran_is_a_client_gc() -> None:
    from tpot_locust.harness.watch.gc_watch import CollectorWatch

    watch = CollectorWatch()
    watch._callback("start", {"generation": 2})
    watch._callback("stop", {"generation": 2})
    ((start, end, _),) = watch._windows
    assert watch.during(start - 5, end + 5) == 2
    assert watch.during(end + 1_000_000, end + 2_000_000) is None
    health = ClientHealth()
    health.note_stall(0, 40_000_000, gc_generation=2)
    health.note_stall(50_000_000, 60_000_000)
    merged = ClientHealth.decode(health.encode())
    assert (merged.stalls, merged.gc_stalls, merged.gc_stalled_ns) == (2, 1, 40_000_000)
    assert merged.worst_stalls[0]["gc"] == 2 and merged.worst_stalls[1]["gc"] is None
