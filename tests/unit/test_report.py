"""The report's check of the load generator itself: did it read token data on time?"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import numpy as np

from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.live_sections import LiveSections
from tpot_locust.metrics.metric_set import ClassCounters, MetricSet
from tpot_locust.report.client_figures import CLIENT_BUSY_READ_DELAY_MS, busy_advice
from tpot_locust.report.progress import WIDTH, format_progress
from tpot_locust.report.summary import build_summary
from tpot_locust.report.terminal_report import format_report
from tpot_locust.report.token_figures import format_prompt_tokens, prompt_comparison


def summary_with_read_delays(delays_us: list[int]) -> dict:
    totals = MetricSet()
    metrics = totals.for_group("chat")
    metrics.counters.ok = 1
    record_many(metrics.histogram("tpot"), np.full(100, 5_000))
    if delays_us:
        record_many(metrics.histogram("read_delay"), np.asarray(delays_us))
    return build_summary(totals)


def test_late_reads_mark_the_client_busy_and_the_report_says_so() -> None:
    late_us = int(CLIENT_BUSY_READ_DELAY_MS * 1000) * 4
    summary = summary_with_read_delays([100] * 85 + [late_us] * 15)  # P90 is a late read
    assert summary["client"]["busy"] is True
    assert abs(summary["client"]["read_delay_p90_ms"] - late_us / 1000) < 0.01  # HDR precision
    report = format_report(summary)
    assert "! client busy: 10 % of reads came more than 4.0 ms after their data" in report
    assert "Read delay: kernel receipt of a read's bytes" in report


def test_reads_on_time_give_no_warning() -> None:
    summary = summary_with_read_delays([100] * 95 + [50_000] * 5)  # 5 % late: the OS, now
    assert summary["client"]["busy"] is False  # and then (its P99 is late: 50 ms)
    assert abs(summary["client"]["read_delay_p90_ms"] - 0.1) < 0.001
    assert summary["client"]["read_delay_p99_ms"] > 49
    assert "client busy" not in format_report(summary)


def test_without_kernel_stamps_the_check_says_unknown_not_fine() -> None:
    summary = summary_with_read_delays([])  # TLS or not Linux: reads carry no kernel stamp
    keys = ("read_delay_p90_ms", "read_delay_p99_ms", "busy")
    read_check = {key: summary["client"][key] for key in keys}
    assert read_check == {"read_delay_p90_ms": None, "read_delay_p99_ms": None, "busy": None}
    report = format_report(summary)
    assert "client busy" not in report and "Read delay" not in report


def test_a_busy_worker_is_named_even_when_the_merged_delays_look_fine() -> None:
    summary = summary_with_read_delays([100] * 1000)
    summary["workers"] = {
        "seen": 3,
        "reported_in_full": 3,
        "missing": [],
        "read_delay_p90_ms": {"w-a": 0.2, "w-b": 6.5, "w-c": 0.3},
        "read_delay_p99_ms": {"w-a": 9.0, "w-b": 9.5, "w-c": 9.0},  # the OS's, now and then
    }
    report = format_report(summary)
    assert (
        "! busy workers (read delay P90 > 1 ms, or loop held over 50% of the time): "
        "w-b (read delay P90 6.5 ms)"
    ) in report
    assert "w-a" not in report and "client busy" not in report


def test_a_saturated_loop_marks_the_client_busy_however_late_its_reads() -> None:
    """Batched reads' delays are their batches': a loop held most of the time can keep them
    short. Its held share says it, with or without kernel stamps."""
    for delays_us in ([100] * 100, []):
        totals = MetricSet()
        totals.for_group("chat").counters.ok = 1
        if delays_us:
            record_many(totals.for_group("chat").histogram("read_delay"), np.asarray(delays_us))
        totals.client.note_stall(0, 650_000_000)
        totals.client.record_lags(array("q", [0] * 10), watched_ns=1_000_000_000)
        summary = build_summary(totals)
        assert summary["client"]["loop_held_share"] == 0.65
        assert summary["client"]["loop_saturated"] is True and summary["client"]["busy"] is True
        assert (
            "! client busy: its loop was held in stalls 65% of the time (over 50%: too "
            "little left to read and send on time)"
        ) in format_report(summary)
    calm = MetricSet()
    calm.client.note_stall(0, 40_000_000)
    calm.client.record_lags(array("q", [0]), watched_ns=1_000_000_000)
    calm_summary = build_summary(calm)
    assert calm_summary["client"]["loop_saturated"] is False
    assert calm_summary["client"]["busy"] is None  # no kernel stamps: unknown, not fine


def test_the_client_cpu_a_token_is_the_processes_cpu_over_their_tokens() -> None:
    totals = MetricSet()
    for group, tokens in (("chat", 30_000), ("chat@m", 10_000)):
        totals.for_group(group).counters.arrived_tokens = tokens
    totals.client.record_lags(array("q", [0]), watched_ns=10**9, cpu_ns=300_000_000)
    totals.client.record_lags(array("q", [0]), watched_ns=10**9, cpu_ns=100_000_000)
    client = build_summary(totals)["client"]
    assert (client["cpu_s"], client["cpu_us_per_token"]) == (0.4, 10.0)
    assert client["tokens_per_core_s"] == 100_000  # 1 s of one core at 10 us a token
    line = "client CPU: 0.4 s, 10 us a token that arrived: at that cost one core reads ~100,000"
    assert line in format_report(build_summary(totals))
    unmeasured = build_summary(MetricSet())["client"]  # no probe, no token: said as such
    assert unmeasured["cpu_us_per_token"] is None and unmeasured["tokens_per_core_s"] is None
    assert "client CPU" not in format_report(build_summary(MetricSet()))


def test_a_busy_clients_advice_counts_the_cores_its_measured_cost_needs() -> None:
    summary = summary_with_read_delays([5_000] * 1000)
    summary["client"] |= {"cpu_us_per_token": 25.0, "tokens_per_core_s": 40_000}
    summary["tokens"]["per_s"] = 90_000.0
    report = format_report(summary)
    assert "! client busy" in report
    assert (
        "(measured: 25 us of CPU a token, so one core reads ~40,000 tokens/s; this run's "
        "90,000 tokens/s need about 3 processes with a core each)"
    ) in " ".join(report.split())


def test_a_worker_with_a_saturated_loop_is_named_busy() -> None:
    summary = summary_with_read_delays([100] * 1000)
    summary["workers"] = {
        "seen": 2,
        "reported_in_full": 2,
        "missing": [],
        "read_delay_p90_ms": {"w-a": 0.2, "w-b": 0.3},
        "loop_held_share": {"w-a": 0.01, "w-b": 0.7},
    }
    report = format_report(summary)
    assert "of the time): w-b (loop held 70%)" in report and "w-a" not in report


def test_progress_line_shows_the_intervals_read_delay() -> None:
    point = {
        "t": 12.0,
        "users": 8,
        "tokens_per_s": 1500.0,
        "requests_ok": 40,
        "requests_failed": 0,
        "tpot": {"count": 900, "p50": 5.0, "p99": 7.0},
        "read_delay": {"count": 950, "p50": 0.1, "p90": 0.2, "p99": 0.4},
    }
    assert format_progress(point, 60) == (
        "[    12s / 60s]  users 8  1,500 tokens/s  TPOT p50 5.00 p99 7.00 ms  ok 40  "
        "read delay p99 0.40 ms"
    )
    point["read_delay"]["p99"] = 2.5  # now and then late: the OS
    assert format_progress(point, 60).endswith("read delay p99 2.50 ms")
    point["read_delay"]["p90"] = 2.4  # late read after read: busy, and the p90 where it fits
    assert format_progress(point, 60).endswith("ok 40 (client busy)")
    no_tpot = point | {"tpot": {"count": 0}}
    assert format_progress(no_tpot, 60).endswith("ok 40 (client busy: read delay p90 2.40 ms)")
    point["itl"] = {"count": 900, "p90": 3.0}  # but within the interval's own token gap
    assert format_progress(point, 60).endswith("read delay p99 2.50 ms")
    point["read_delay"]["count"] = 0  # no kernel stamps: nothing to show
    assert "read delay" not in format_progress(point, 60)
    point["loop_held_share"] = 0.3  # the loop held a third of the interval: not saturated
    assert "busy" not in format_progress(point, 60)
    point["loop_held_share"] = 0.62
    assert format_progress(point, 60).endswith("(client busy)")
    assert format_progress(point | {"tpot": {"count": 0}}, 60).endswith("loop held 62%)")
    point["tokens_per_s"] = None  # a final point too short for rates
    assert "  - tokens/s  " in format_progress(point, 60)
    point["requests_failed"] = 3  # failures are said; none, not
    assert "ok 40 failed 3" in format_progress(point, 60)


def test_the_progress_line_fits_100_columns() -> None:
    """A terminal of 100 columns wrapped the old line (148 columns in a quickstart run)."""
    quickstart = {
        "t": 1.0,
        "users": 8,
        "tokens_per_s": 2732.0,
        "requests_ok": 16,
        "requests_failed": 0,
        "tpot": {"count": 900, "p50": 1.39, "p99": 7.48},
        "itl": {"count": 900, "p90": 3.8},
        "read_delay": {"count": 950, "p50": 0.1, "p90": 0.89, "p99": 1.92},
        "stalls": 7,
        "loop_lag_max_ms": 10.0,
    }
    line = format_progress(quickstart, 5)
    assert len(line) <= WIDTH == 100, line
    assert line.startswith("[     1s / 5s]  users 8  2,732 tokens/s  TPOT p50 1.39 p99 7.48 ms")
    assert "stalls 7 (max 10 ms)" in line  # the read delay's p99 gave way first
    assert format_progress(quickstart, 5, warmup=True).endswith("(warm-up: not recorded)")
    huge = quickstart | {
        "t": 86_399.0,
        "users": 100_000,
        "tokens_per_s": 12_345_678.0,
        "requests_ok": 1_234_567,
        "requests_failed": 7_654_321,
        "tpot": {"count": 9, "p50": 12_345.67, "p99": 98_765.43},
        "read_delay": {"count": 950, "p50": 90.0, "p90": 2_000.0, "p99": 3_000.0},
        "loop_held_share": 0.9,
    }
    for warmup in (False, True):
        busy = format_progress(huge, 86_400, warmup)
        assert len(busy) <= WIDTH and "TPOT p50 12345.67" in busy, busy
        assert busy.endswith("(client busy)"), busy  # said, where its figures cannot fit


def test_a_busy_client_beside_its_server_is_told_more_workers_will_not_help() -> None:
    beside = busy_advice({"run": RunFacts(host="http://127.0.0.1:8000", bursts={"windows": 4})})
    assert "shares this machine" in beside and "prefills" in beside
    assert "more workers cannot give back" in beside
    remote = busy_advice({"run": RunFacts(host="http://gpu-node-7:8000")})
    assert remote == "Use more workers or less load per worker."


def test_prompt_tokens_requested_and_counted_are_printed() -> None:
    counters = ClassCounters(
        prompt_compared_requests=4,
        prompt_compared_requested=400,
        prompt_compared_reported=488,
        prompt_difference_max=31,
    )
    line = format_prompt_tokens({"prompt": prompt_comparison(counters)})
    assert line == (
        "prompt tokens: requested 400, the server counted 488 (1.22x; per request +22.0 on "
        "average, at most 31 apart)"
    )
    assert prompt_comparison(ClassCounters()) is None


def test_the_report_says_how_many_sends_are_departures_seen_by_the_tap() -> None:
    totals = MetricSet()
    counters = totals.for_group("chat").counters
    counters.ok, counters.stamped_segment, counters.departed_from_tap = 3, 3, 2
    other = MetricSet()  # a worker's, merged: the counter adds as the others
    other_counters = other.for_group("chat").counters
    other_counters.ok, other_counters.stamped_segment, other_counters.departed_from_tap = 1, 1, 1
    totals.add(other)
    summary = build_summary(totals)
    assert summary["client"]["departed_from_tap"] == 3
    assert "sends: the tap's departure (3 of 4), else just before the write" in format_report(
        summary
    )


def test_the_report_says_how_the_bodies_were_read() -> None:
    totals = MetricSet()
    counters = totals.for_group("chat").counters
    counters.ok, counters.stamped_segment, counters.read_in_batches = 3, 3, 2
    other = MetricSet()  # a worker's, merged: the counter adds as the others
    other_counters = other.for_group("chat").counters
    other_counters.ok, other_counters.stamped_segment, other_counters.read_in_batches = 1, 1, 1
    totals.add(other)
    summary = build_summary(totals, run=RunFacts(read_batch_ms=20.0))
    assert summary["client"]["read_in_batches"] == 3
    assert "reads: 3 of 4 bodies in 20 ms batches after their first read" in format_report(summary)
    at_once = MetricSet()
    at_once.for_group("chat").counters.ok = at_once.for_group("chat").counters.stamped_kernel = 2
    summary = build_summary(at_once, run=RunFacts(read_batch_ms=0.0))
    assert "reads: each body read as its data came" in format_report(summary)


def test_the_tpot_tab_shows_figures_as_the_terminal_writes_them() -> None:
    """Locust's table prints a value bare: a mean of 2 beside 1.999, a count of 12422."""
    from tpot_locust.harness.web.web_tab import tab_rows

    totals = MetricSet()
    metrics = totals.for_group("chat")
    record_many(metrics.histogram("tpot"), np.full(12_422, 2_000))
    state = SimpleNamespace(
        collector=SimpleNamespace(totals=totals, sections=LiveSections(("tpot",)))
    )
    (row,) = [row for row in tab_rows(state) if row["metric"] == "TPOT"]  # type: ignore[arg-type]
    assert row["count"] == "12,422" and row["mean"] == "2.000" and row["p50"] == "2.000"
    assert row["max"] == "2.000" and row["tokens_per_s"] == "500.0"
