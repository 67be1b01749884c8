"""``client_figures.format_held_reporting``: a merging process held (SIGSTOP, a paused VM)
is said, from its time series' late interval; a busy one is not."""

from __future__ import annotations

from typing import Any

from tpot_locust.common.run_facts import RunFacts
from tpot_locust.report.client_figures import format_held_reporting


def _summary(intervals: list[float], workers: bool) -> Any:
    points, t = [], 0.0
    for length in intervals:
        t += length
        points.append({"t": round(t, 3), "interval_s": length})
    summary: dict[str, Any] = {"run": RunFacts(report_interval_s=1.0), "timeseries": points}
    if workers:
        summary["workers"] = {"seen": 2, "missing": []}
    return summary


def test_a_master_held_thirty_seconds_is_said_with_where() -> None:
    lines = format_held_reporting(_summary([1.0, 1.04, 30.44, 0.48], workers=True))
    assert lines == [
        "! the master was held 30.4 s (no report interval closed from 2.0 s to 32.5 s): its "
        "time series has a hole there; the workers streamed on and their deltas waited for "
        "it: none lost"
    ]


def test_a_local_process_held_twice_names_the_longest_and_counts_the_rest() -> None:
    (line,) = format_held_reporting(_summary([1.0, 6.0, 1.0, 12.0, 1.0], workers=False))
    assert line.startswith("! the Locust process was held 12.0 s (no report interval closed")
    assert "; 1 more such hold):" in line and "client stalls" in line


def test_a_busy_process_closing_intervals_late_is_not_held() -> None:
    assert format_held_reporting(_summary([1.0, 1.5, 2.9, 4.9, 1.0], workers=True)) == []
    assert format_held_reporting({"run": RunFacts(), "timeseries": None}) == []
