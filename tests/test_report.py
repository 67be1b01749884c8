"""The report's check of the load generator itself: did it read token data on time?"""

from __future__ import annotations

import numpy as np

from tpot_locust.histograms import record_many
from tpot_locust.recorder import MetricSet
from tpot_locust.report import CLIENT_BUSY_READ_DELAY_MS, build_summary, format_report


def summary_with_read_delays(delays_us: list[int]) -> dict:
    totals = MetricSet()
    metrics = totals.for_class("chat")
    metrics.counters.ok = 1
    record_many(metrics.histogram("tpot"), np.full(100, 5_000))
    if delays_us:
        record_many(metrics.histogram("read_delay"), np.asarray(delays_us))
    return build_summary(totals)


def test_late_reads_mark_the_client_busy_and_the_report_says_so() -> None:
    late_us = int(CLIENT_BUSY_READ_DELAY_MS * 1000) * 4
    summary = summary_with_read_delays([100] * 97 + [late_us] * 3)  # P99 is a late read
    assert summary["client"]["busy"] is True
    assert abs(summary["client"]["read_delay_p99_ms"] - late_us / 1000) < 0.01  # HDR precision
    report = format_report(summary)
    assert "! client busy: 1 % of reads came more than 4.0 ms after their data arrived" in report
    assert "Read delay: kernel receipt of a read's bytes" in report


def test_reads_on_time_give_no_warning() -> None:
    summary = summary_with_read_delays([100] * 995 + [50_000] * 5)  # 0.5 % late: under P99
    assert summary["client"]["busy"] is False
    assert abs(summary["client"]["read_delay_p99_ms"] - 0.1) < 0.001
    assert "client busy" not in format_report(summary)


def test_without_kernel_stamps_the_check_says_unknown_not_fine() -> None:
    summary = summary_with_read_delays([])  # TLS or not Linux: reads carry no kernel stamp
    assert summary["client"] == {"read_delay_p99_ms": None, "busy": None}
    report = format_report(summary)
    assert "client busy" not in report and "Read delay" not in report
