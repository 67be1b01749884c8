"""A run's percentile intervals: read from its per-interval histograms, put in its summary.

The interval logs (``OUT/histograms/<metric>.hlog``, one histogram a report interval, all
classes merged, merged exactly across workers by the master) are the run's time slices;
``metrics.intervals`` makes each percentile's 95 % interval from them. Only the slices
inside the run's window count, as only its gaps count in the figures.
"""

from __future__ import annotations

import math
from pathlib import Path

from hdrh.histogram import HdrHistogram

from tpot_locust.common.bounded_files import BoundedFileError, read_text
from tpot_locust.common.percentiles import PERCENTILES, key_of
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.collector import INTERVAL_METRICS
from tpot_locust.metrics.histograms import (
    HistogramDecodeError,
    add_into,
    decode_histogram,
    new_histogram,
)
from tpot_locust.metrics.intervals import SECTIONS, PercentileInterval, percentile_intervals
from tpot_locust.report.summary_types import Summary

MAX_LOG_BYTES = 256 * 1024 * 1024  # as every saved results file
_START = "#[StartTime: "


def read_slices(path: Path, run: RunFacts) -> tuple[list[HdrHistogram], float]:
    """The time slices of an interval log inside the run's window (a line whose middle lies
    in it), in time order and already merged into at most ``SECTIONS`` contiguous sections
    (a day's soak of 1 s lines is 86,400 of them: each decoded one is ~190 KB), and the
    window's length (s); none where the log or the window is missing. A damaged line is a
    slice fewer, never a wrong one or an error."""
    window = run.window_wall_ns
    if window is None or not path.is_file():
        return [], 0.0
    start_ns, end_ns = int(window[0]), int(window[1])
    try:
        text = read_text(path, MAX_LOG_BYTES)
    except (OSError, BoundedFileError):
        return [], 0.0
    inside = _lines_inside(text.splitlines(), start_ns, end_ns)
    sections = [new_histogram() for _ in range(min(SECTIONS, len(inside)))]
    filled = [False] * len(sections)
    for index, encoded in enumerate(inside):
        try:
            histogram = decode_histogram(encoded)
        except (ValueError, HistogramDecodeError):
            continue
        section = index * len(sections) // len(inside)
        add_into(sections[section], histogram)
        filled[section] = True
    return [s for s, kept in zip(sections, filled, strict=True) if kept], (end_ns - start_ns) / 1e9


def _lines_inside(lines: list[str], start_ns: int, end_ns: int) -> list[str]:
    """The encoded histograms of the log's lines whose middle lies in [start, end] (ns)."""
    log_start_s: float | None = None
    inside = []
    for line in lines:
        try:
            if line.startswith(_START):
                log_start_s = _finite(line[len(_START) :].split(" ", 1)[0])
                continue
            if line.startswith(("#", '"')) or log_start_s is None:
                continue
            fields = line.split(",", 3)
            offset_s, length_s = _finite(fields[0]), _finite(fields[1])
            middle_ns = int((log_start_s + offset_s + length_s / 2) * 1e9)
            if start_ns <= middle_ns <= end_ns and len(fields) == 4:
                inside.append(fields[3])
        except (IndexError, ValueError, OverflowError):
            continue
    return inside


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r}: not a finite number")
    return value


def add_intervals(summary: Summary, folder: ResultsFolder) -> None:
    """Each metric's ``ci95`` (and ``ci95_not_measured``) into ``summary``, from ``folder``'s
    interval logs; a metric without a log gets none."""
    run = summary.get("run")
    if not isinstance(run, RunFacts):
        return
    _add_to(summary, folder, run, None)
    for class_name, scope in summary.get("classes", {}).items():
        if len(summary["classes"]) > 1:
            _add_to(scope, folder, run, class_name)


def _add_to(scope: Summary, folder: ResultsFolder, run: RunFacts, class_name: str | None) -> None:
    for name in INTERVAL_METRICS:
        figures = scope["metrics"].get(name)
        if not figures or not figures.get("count"):
            continue
        slices, window_s = read_slices(folder.interval_log(name, class_name), run)
        if not slices:
            continue
        intervals: dict[str, list[float] | None] = {}
        reasons: dict[str, str] = {}
        whole = {percentile: figures[key_of(percentile)] * 1000 for percentile in PERCENTILES}
        for percentile, interval in percentile_intervals(slices, whole, window_s).items():
            key = key_of(percentile)
            intervals[key] = _bounds(interval)
            if interval.why_not is not None:
                reasons[key] = _reason(interval)
        figures["ci95"] = intervals
        figures["ci95_not_measured"] = reasons
        figures["ci95_sections"] = len(slices)


def _bounds(interval: PercentileInterval) -> list[float] | None:
    if interval.low_ms is None or interval.high_ms is None:
        return None
    return [interval.low_ms, interval.high_ms]


def _reason(interval: PercentileInterval) -> str:
    longer = f" (run ~{interval.longer_s:,.0f} s longer)" if interval.longer_s else ""
    return f"not measured{longer}: {interval.why_not}"


__all__ = ["INTERVAL_METRICS", "add_intervals", "read_slices"]
