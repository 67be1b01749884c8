"""One metric's figures and its table: ``summary.json``'s ``metrics.<name>`` (the
percentiles, the samples above each, the samples that overlap client stalls and every figure
again with them set aside) and the terminal's table of them, read by the full report
(``report.terminal_report``) and the first screen's TPOT table.

Computed from merged histograms, never from averages of percentiles, so ``tpot-locust
report OUT`` reproduces the end-of-run figures exactly.
"""

from __future__ import annotations

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.percentiles import PERCENTILE_KEYS, PERCENTILES, key_of, percentile_key
from tpot_locust.metrics.histogram_names import STALL_METRICS, phase_metric
from tpot_locust.metrics.histograms import count_above, histogram_stats, without
from tpot_locust.metrics.metric_set import ClassMetrics
from tpot_locust.metrics.stalls import CLIENT_STALL
from tpot_locust.report.summary_types import MetricFigures, SetAside, StallFigures
from tpot_locust.scenario.slo import TAIL_MIN_SAMPLES

PER_TOKEN_METRICS = catalogue.names("per_token")
TITLES = catalogue.titles()


def metric_summary(metrics: ClassMetrics, name: str) -> MetricFigures:
    """``name``'s figures in ms, from its merged histogram: ``metrics.<name>``."""
    stats = histogram_stats(metrics.read(name))
    summary: MetricFigures = {
        "unit": "ms",
        "count": stats.count,
        "mean": round(stats.mean / 1000, 4),
    }
    for percentile in PERCENTILES:
        summary[key_of(percentile)] = stats.percentiles[percentile] / 1000
    summary["max"] = stats.max / 1000
    summary["min"] = stats.min / 1000
    summary["above"] = {percentile_key(p): stats.above[p] for p in PERCENTILES}
    summary["unmeasured_tail"] = [
        percentile_key(p) for p in PERCENTILES if stats.count and stats.above[p] < TAIL_MIN_SAMPLES
    ]
    median = stats.percentiles[50.0]
    summary["skew_mean_over_median"] = round(stats.mean / median, 3) if median else None
    summary["tail_p99.99_over_median"] = (
        round(stats.percentiles[99.99] / median, 2) if median else None
    )
    if name in STALL_METRICS:
        summary[CLIENT_STALL] = stall_summary(metrics, name, stats.percentiles)
    return summary


def stall_summary(metrics: ClassMetrics, name: str, percentiles: dict[float, int]) -> StallFigures:
    """The samples of ``name`` that overlap client stalls: how many, how many lie above
    each printed percentile, and every figure again with them set aside."""
    tagged = metrics.histograms.get(phase_metric(name, CLIENT_STALL))
    if tagged is None or not tagged.total_count:
        return {"count": 0}
    clean = histogram_stats(without(metrics.read(name), tagged))
    set_aside: SetAside = {"count": clean.count}
    for p in PERCENTILES:
        set_aside[key_of(p)] = clean.percentiles[p] / 1000
    set_aside["max"] = clean.max / 1000
    return {
        "count": tagged.total_count,
        "above": {percentile_key(p): count_above(tagged, percentiles[p]) for p in PERCENTILES},
        "max": histogram_stats(tagged, ()).max / 1000,
        "set_aside": set_aside,
    }


# A metric whose summary failed at the end of a run: no samples, as the tables skip it.
EMPTY_METRIC: dict[str, object] = {
    "unit": "ms",
    "count": 0,
    "mean": 0.0,
    **dict.fromkeys(PERCENTILE_KEYS, 0.0),
    "max": 0.0,
    "min": 0.0,
    "above": dict.fromkeys(PERCENTILE_KEYS, 0),
    "unmeasured_tail": [],
    "skew_mean_over_median": None,
    "tail_p99.99_over_median": None,
    "failed": True,
}


def _ms(value: float) -> str:
    return f"{value:10.3f}"


INTERVAL_TITLE = "95% interval"  # metrics.<metric>.ci95: report.run_intervals
WIDTH = 100  # the terminal's columns our lines fit


def _interval_text(bounds: list[float] | None) -> str:
    """A percentile's 95 % interval, ``low-high`` ms; ``not measured`` where it has none."""
    if bounds is None:
        return "not measured"
    return f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def _tokens_per_s(value_ms: float) -> str:
    return f"{1000 / value_ms:10.1f}" if value_ms > 0 else f"{'-':>10}"


def format_metric(name: str, metric: MetricFigures) -> list[str]:
    """One metric's table; where samples overlap client stalls, a column with them set
    aside and a warning next to every percentile with any of them above it."""
    per_token = name in PER_TOKEN_METRICS
    stalls = metric.get(CLIENT_STALL) or {"count": 0}
    intervals = metric.get("ci95")
    lines = [f"{TITLES[name]}   count {metric['count']:,}"]
    header = f"  {'':8}{'ms':>10}" + (f"{'tokens/s':>10}" if per_token else "")
    header += f"{'samples above':>16}" + (f"{INTERVAL_TITLE:>22}" if intervals else "")
    lines.append(header + (f"{'stall-free':>12}" if stalls["count"] else ""))
    rows: list[tuple[str, float, str]] = [("mean", metric["mean"], "")]
    for percentile in PERCENTILES:
        key = key_of(percentile)
        label = "median" if percentile == 50.0 else f"P{percentile:g}"
        above = metric["above"][key]
        unmeasured = key in metric["unmeasured_tail"]
        rest = f"{above:14,}" + (" *" if unmeasured else "  ")
        if intervals:
            rest += f"{_interval_text(intervals.get(key)):>22}"
        if stalls["count"]:
            rest += _ms(stalls["set_aside"][key]).rjust(12)
            if tagged := stalls["above"][key]:
                whose = ": the client's tail" if 2 * tagged >= above else ""
                rest += f"  ! {tagged:,} in stalls{whose}"
        rows.append((label, metric[key], rest))
    max_rest = f"{'':16}{_ms(stalls['set_aside']['max']).rjust(12)}" if stalls["count"] else ""
    rows.append(("max", metric["max"], max_rest))
    for label, value, rest in rows:
        line = f"  {label:8}{_ms(value)}" + (_tokens_per_s(value) if per_token else "")
        lines.append((line + rest).rstrip())
    if intervals and (reasons := metric.get("ci95_not_measured")):
        first, why = next(iter(reasons.items()))
        note = f"  {first.upper()}'s interval {why}"
        lines.append(note if len(note) <= WIDTH else note[: WIDTH - 3] + "...")
    if metric["unmeasured_tail"]:
        lines.append(
            f"  * fewer than {TAIL_MIN_SAMPLES} samples above: that tail is not yet measured "
            "(run longer)"
        )
    if stalls["count"]:
        lines.append(
            f"  {stalls['count']:,} samples overlap client stalls (worst {stalls['max']:.1f} ms);"
            " stall-free: every figure with them set aside"
        )
    skew, tail = metric["skew_mean_over_median"], metric["tail_p99.99_over_median"]
    if skew is not None:
        lines.append(
            f"  skew (mean/median) {skew:.2f}x   tail amplification (P99.99/median) {tail:.1f}x"
        )
    return lines
