"""The SVG charts and the HTML report, read as a browser would parse them."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.charts import (
    Curve,
    Shading,
    nines,
    percentile_chart,
    thinned,
    timeseries_chart,
)
from tpot_locust.report.html import RunView, distribution_points, render_report, timeseries_shading
from tpot_locust.report.summary import build_summary

SVG = "{http://www.w3.org/2000/svg}"


def test_the_percentile_axis_gives_each_nine_the_same_room() -> None:
    assert nines(0) == 0 and nines(90) == 1 and abs(nines(99.99) - 4) < 1e-9
    assert nines(100) == 6  # the max sits at the end of the axis
    svg = ET.fromstring(percentile_chart("TPOT", [Curve("a", [(50, 1.0), (99.99, 5.0)])]))
    ticks = {
        t.text: float(t.get("x", 0)) for t in svg.iter(f"{SVG}text") if t.get("class") == "xtick"
    }
    gaps = [
        ticks["p99"] - ticks["p90"],
        ticks["p99.9"] - ticks["p99"],
        ticks["p99.99"] - ticks["p99.9"],
    ]
    assert max(gaps) - min(gaps) < 0.2
    # the axis stops at the tick past where the samples stop (issue 46), not at p99.9999
    assert "p99.999" not in ticks and "p99.9999" not in ticks


def test_time_series_shade_bursts_and_mark_stalls() -> None:
    shading = Shading(spans=[(2.0, 3.0)], marks=[4.0])
    svg = ET.fromstring(
        timeseries_chart("TTFT", [Curve("p99", [(1, 2.0), (5, 3.0)])], "ms", shading)
    )
    classes = [element.get("class") for element in svg.iter()]
    assert classes.count("burst") == 2  # the span and its legend swatch
    assert classes.count("stall") == 2
    assert len(svg.findall(f"{SVG}polyline")) == 1


def test_only_stalls_that_can_reach_the_tail_are_marked() -> None:
    """Issue 46, item 3: a quiet run's 2-3 ms stalls put a red mark on every second."""
    points = [
        {"t": 1.0, "stalls": 3, "loop_lag_max_ms": 3.0, "tpot": {"count": 900, "p99": 8.0}},
        {"t": 2.0, "stalls": 1, "loop_lag_max_ms": 40.0, "tpot": {"count": 900, "p99": 8.0}},
        {"t": 3.0, "stalls": 1, "loop_lag_max_ms": 12.0, "tpot": {"count": 0}},
        {"t": 4.0, "stalls": 0, "loop_lag_max_ms": 90.0, "tpot": {"count": 900, "p99": 8.0}},
    ]
    shading = timeseries_shading({"timeseries": points, "run": NO_FACTS})
    assert shading.marks == [2.0, 3.0] and "TPOT p99" in shading.mark_label


def _run(classes: dict[str, float]) -> RunView:
    totals = MetricSet()
    rng = np.random.default_rng(1)
    for name, gap_ms in classes.items():
        metrics = totals.for_group(name)
        metrics.counters.ok = 100
        record_many(metrics.histogram("tpot"), rng.exponential(gap_ms * 1000, 20_000) + 1)
    return RunView("run", build_summary(totals), totals, "name: run\n")


def test_distribution_points_follow_the_histogram_to_its_max() -> None:
    run = _run({"chat": 2.0})
    points = distribution_points(run.totals.combined(), "tpot")
    count = run.totals.combined().histograms["tpot"].total_count
    # the max at the percentile its one sample stands for: where the samples stop
    last = max(100 * (1 - 1 / count), points[-2][0])
    assert points[0][0] == 0 and points[-1][0] == pytest.approx(last) and last < 100
    values = [value for _, value in points]
    assert values == sorted(values)
    assert abs(points[-1][1] - run.summary["metrics"]["tpot"]["max"]) < 1e-9


def test_the_report_is_one_file_with_every_section_and_no_outside_reference() -> None:
    html = render_report([_run({"chat": 2.0, "long": 5.0})])
    for section in (
        "Run",
        "Latency (ms)",
        "Percentile distributions",
        "Over time",
        "Worst gaps",
        "Scenario",
    ):
        assert f"<h2>{section}</h2>" in html
    assert not re.search(r"(src|href)=|https?://(?!www\.w3\.org/2000/svg)|@import|<script", html)
    # one curve for all traffic and one per class, on the TPOT chart
    tpot_chart = html.split('aria-label="TPOT by percentile"')[1].split("</svg>")[0]
    assert tpot_chart.count("<polyline") == 3
    assert len(html) < 300_000


def test_a_long_series_is_thinned_and_keeps_its_spikes() -> None:
    points = [(float(t), 1.0) for t in range(3600)]
    points[1234] = (1234.0, 50.0)
    thin = thinned(points)
    assert len(thin) <= 600 and max(y for _, y in thin) == 50.0
    assert thin[-1][0] == 3599.0
    svg = timeseries_chart("TPOT", [Curve("p99", points)], "ms")
    assert len(svg) < 30_000
