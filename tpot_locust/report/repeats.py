"""Repeated runs of one scenario side by side: how far apart they land, against what one run
says of itself.

Each run's percentile comes with its own 95 % interval (``run_intervals``). Repeating the
run with fresh seeds shows the rest: the spread of the runs' figures (min, median, max), an
interval from the runs themselves (Student's t over their figures), one run's interval
(the median of theirs) and the pooled interval (every run's time slices as one long run).
Where the runs scatter wider than one run's interval predicts, the server (or the machine)
drifts between runs, and one run's interval understates the uncertainty: the table says so.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from tpot_locust.common.percentiles import PERCENTILES, key_of
from tpot_locust.common.results_files import write_file
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import add_into, histogram_stats, new_histogram
from tpot_locust.metrics.intervals import SECTIONS, percentile_interval, t_975
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.histograms_file import load_results
from tpot_locust.report.run_intervals import INTERVAL_METRICS, read_slices
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.window_figures import window_seconds

REPEATS_FILE = "repeats.json"
# facts of one run only: the series has no one window, clock, timeline or server's samples
ONE_RUN_FACTS = (
    "timeseries",
    "window_wall_ns",
    "process_windows_wall_ns",
    "clock_start_wall_ns",
    "start_wall_s",
    "server_metrics",
    "gpu_metrics",
    "bursts",
    "prefill",
    "stopped_because",
    "test",
)
DRIFT_LEVEL = 0.05  # the chance that runs of a steady server are called drifting
SHOWN_METRICS = ("tpot", "ttft")


def repeat_figures(folders: list[Path], summaries: list[Summary]) -> dict[str, object]:
    """``repeats.json``: per metric and percentile, each run's figure, their spread, the
    interval across runs, one run's interval (median half-width) and the pooled interval."""
    figures: dict[str, Any] = {}
    for metric in INTERVAL_METRICS:
        rows = {}
        pooled = _pooled_slices(folders, summaries, metric)
        for percentile in PERCENTILES:
            key = key_of(percentile)
            rows[key] = _row(summaries, metric, key, percentile, pooled)
        figures[metric] = rows
    return {"runs": [str(folder) for folder in folders], "metrics": figures}


def _row(
    summaries: list[Summary],
    metric: str,
    key: str,
    percentile: float,
    pooled: tuple[list[object], float],
) -> dict[str, object]:
    values = [value for s in summaries if (value := _figure(s, metric, key)) is not None]
    row: dict[str, Any] = {"values": values}
    if not values:
        return row
    row |= {"min": min(values), "median": statistics.median(values), "max": max(values)}
    halves = [
        (bounds[1] - bounds[0]) / 2
        for s in summaries
        if (bounds := (s["metrics"].get(metric, {}).get("ci95") or {}).get(key)) is not None
    ]
    sections = [
        int(s["metrics"].get(metric, {}).get("ci95_sections") or SECTIONS) for s in summaries
    ]
    row["one_run_half_ms"] = round(statistics.median(halves), 4) if halves else None
    if len(values) >= 2:
        mean, spread = statistics.fmean(values), statistics.stdev(values)
        half = t_975(len(values) - 1) * spread / math.sqrt(len(values))
        row["across_runs"] = [round(mean - half, 4), round(mean + half, 4)]
        if halves:  # one run's standard error, from its own interval (its k sections)
            one_se = statistics.median(halves) / t_975(max(min(sections) - 1, 1))
            row["drift"] = scatters_more(spread, one_se, len(values))
    slices, window_s = pooled
    if slices:
        whole = new_histogram()
        for histogram in slices:
            add_into(whole, histogram)
        value = histogram_stats(whole, (percentile,)).percentiles[percentile]
        interval = percentile_interval(slices, percentile, value, window_s)
        row["pooled"] = round(value / 1000, 4)
        low, high = interval.low_ms, interval.high_ms
        row["pooled_ci95"] = None if low is None or high is None else [low, high]
    return row


def scatters_more(spread: float, one_se: float, runs: int) -> bool:
    """Whether ``runs`` figures of standard deviation ``spread`` scatter more than runs whose
    only noise is one run's standard error ``one_se`` would, at ``DRIFT_LEVEL``: the
    chi-square test of a variance, (n - 1) s^2 / se^2 against its 0.95 quantile
    (Wilson-Hilferty's approximation, within 1 % from 2 degrees of freedom)."""
    if one_se <= 0 or runs < 2:
        return False
    degrees = runs - 1
    z = statistics.NormalDist().inv_cdf(1 - DRIFT_LEVEL)
    quantile = degrees * (1 - 2 / (9 * degrees) + z * math.sqrt(2 / (9 * degrees))) ** 3
    return degrees * spread**2 / one_se**2 > quantile


def _figure(summary: Summary, metric: str, key: str) -> float | None:
    """A metric's percentile figure, None where the run measured none."""
    figures = cast(Mapping[str, Any], summary["metrics"].get(metric) or {})  # keys by name
    return figures.get(key) if figures.get("count") else None


def _pooled_slices(
    folders: list[Path], summaries: list[Summary], metric: str
) -> tuple[list[object], float]:
    """Every run's time slices of ``metric``, run after run, and their windows' length."""
    slices: list[Any] = []
    window_s = 0.0
    for folder, summary in zip(folders, summaries, strict=True):
        run = summary.get("run")
        if isinstance(run, RunFacts):
            more, length = read_slices(ResultsFolder(folder).interval_log(metric), run)
            slices += more
            window_s += length
    return slices, window_s


def merged_results(folders: list[Path]) -> tuple[MetricSet, RunFacts]:
    """The series as one run: every run's totals merged exactly (their histograms added), and
    the facts they share; its duration and window the runs' together (rates are over them).
    Its percentiles have no interval of their own: ``repeats.json`` has the runs'."""
    totals = MetricSet()
    facts: list[RunFacts] = []
    spans_ns: dict[str, int] = {}  # per group: its runs' windows, end to end
    for folder in folders:
        run_totals, run = load_results(folder)
        for group, metrics in run_totals.groups.items():
            span = round(window_seconds(metrics.counters) * 1e9)
            spans_ns[group] = spans_ns.get(group, 0) + span
        totals.add(run_totals)
        facts.append(run)
    for group, metrics in totals.groups.items():
        # the series' window is its runs' windows end to end, not the first run's start to
        # the last's end (the time between runs held no traffic): rates over the runs
        counters = metrics.counters
        if firsts := [t for t in (counters.first_send_wall_ns, counters.first_gap_wall_ns) if t]:
            counters.last_token_wall_ns = min(firsts) + spans_ns.get(group, 0)
    durations = [run.duration_s for run in facts]
    errors = [
        f"{folder.name}: {run.report_error}"
        for folder, run in zip(folders, facts, strict=True)
        if run.report_error
    ]
    merged = replace(
        facts[0].without(*ONE_RUN_FACTS),
        duration_s=None if None in durations else round(sum(d or 0.0 for d in durations), 3),
        complete=all(run.complete is not False for run in facts),
        report_error="; ".join(errors) or None,
    )
    return totals, merged


def format_repeats(figures: dict[str, Any]) -> list[str]:
    """The terminal's table of the repeated runs: TPOT and TTFT (every metric in the file)."""
    runs = len(figures["runs"])
    lines = [f"=== {runs} runs of the scenario (fresh seeds): how far apart they land ==="]
    for metric in SHOWN_METRICS:
        rows = figures["metrics"].get(metric) or {}
        lines.append(
            f"{metric.upper()} (ms)   min   median      max   across runs (95%)   "
            "one run +-   pooled (95%)"
        )
        for key, row in rows.items():
            if "median" not in row:
                continue
            across = _pair(row.get("across_runs"))
            one = "-" if row.get("one_run_half_ms") is None else f"{row['one_run_half_ms']:.3f}"
            mark = "  drift" if row.get("drift") else ""
            lines.append(
                f"  {key.upper():7}{row['min']:8.3f}{row['median']:9.3f}{row['max']:9.3f}"
                f"{across:>20}{one:>12}{_pair(row.get('pooled_ci95')):>17}{mark}"
            )
    lines.append("drift: the runs scatter more than one run's interval says (chi-square, 5 %)")
    return lines


def _pair(bounds: list[float] | None) -> str:
    return "-" if bounds is None else f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def write_repeats(out: Path, figures: dict[str, object]) -> Path:
    path = out / REPEATS_FILE
    write_file(path, json.dumps(figures, indent=2) + "\n")
    return path


__all__ = [
    "REPEATS_FILE",
    "format_repeats",
    "merged_results",
    "repeat_figures",
    "scatters_more",
    "write_repeats",
]
