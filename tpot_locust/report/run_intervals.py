"""A run's percentile intervals: read from its per-interval histograms, put in its summary.

The interval logs (``OUT/histograms/<metric>.hlog``, one histogram a report interval, all
classes merged, merged exactly across workers by the master) are the run's time slices;
``metrics.intervals`` makes each percentile's 95 % interval from them. Only the slices
inside the run's window count, as only its gaps count in the figures.
"""

from __future__ import annotations

from pathlib import Path

from hdrh.histogram import HdrHistogram

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.bounded_files import BoundedFileError, read_text
from tpot_locust.common.percentiles import PERCENTILES, key_of
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import HistogramDecodeError, decode_histogram
from tpot_locust.metrics.intervals import PercentileInterval, percentile_interval
from tpot_locust.report.summary_types import Summary

INTERVAL_METRICS = catalogue.names("in_compare")  # the latency metrics a gate compares
MAX_LOG_BYTES = 256 * 1024 * 1024  # as every saved results file
_START = "#[StartTime: "


def read_slices(path: Path, run: RunFacts) -> tuple[list[HdrHistogram], float]:
    """The histograms of an interval log whose middle lies in the run's window, in time
    order, and the window's length (s); none where the log or the window is missing."""
    window = run.window_wall_ns
    if window is None or not path.is_file():
        return [], 0.0
    start_ns, end_ns = int(window[0]), int(window[1])
    log_start_s: float | None = None
    slices = []
    try:
        text = read_text(path, MAX_LOG_BYTES)
    except (OSError, BoundedFileError):
        return [], 0.0
    for line in text.splitlines():
        if line.startswith(_START):
            log_start_s = float(line[len(_START) :].split(" ", 1)[0])
            continue
        if line.startswith(("#", '"')) or log_start_s is None:
            continue
        fields = line.split(",", 3)
        try:
            offset_s, length_s = float(fields[0]), float(fields[1])
            middle_ns = int((log_start_s + offset_s + length_s / 2) * 1e9)
            if start_ns <= middle_ns <= end_ns:
                slices.append(decode_histogram(fields[3]))
        except (IndexError, ValueError, HistogramDecodeError):
            continue  # a damaged line: a slice fewer, never a wrong one
    return slices, (end_ns - start_ns) / 1e9


def add_intervals(summary: Summary, folder: ResultsFolder) -> None:
    """Each metric's ``ci95`` (and ``ci95_not_measured``) into ``summary``, from ``folder``'s
    interval logs; a metric without a log gets none."""
    run = summary.get("run")
    if not isinstance(run, RunFacts):
        return
    for name in INTERVAL_METRICS:
        figures = summary["metrics"].get(name)
        if not figures or not figures.get("count"):
            continue
        slices, window_s = read_slices(folder.interval_log(name), run)
        if not slices:
            continue
        intervals: dict[str, list[float] | None] = {}
        reasons: dict[str, str] = {}
        for percentile in PERCENTILES:
            key = key_of(percentile)
            interval = percentile_interval(slices, percentile, figures[key] * 1000, window_s)
            intervals[key] = _bounds(interval)
            if interval.why_not is not None:
                reasons[key] = _reason(interval)
        figures["ci95"] = intervals
        figures["ci95_not_measured"] = reasons


def _bounds(interval: PercentileInterval) -> list[float] | None:
    if interval.low_ms is None or interval.high_ms is None:
        return None
    return [interval.low_ms, interval.high_ms]


def _reason(interval: PercentileInterval) -> str:
    longer = f" (run ~{interval.longer_s:,.0f} s longer)" if interval.longer_s else ""
    return f"not measured{longer}: {interval.why_not}"


__all__ = ["INTERVAL_METRICS", "add_intervals", "read_slices"]
