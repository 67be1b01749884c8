"""The metric catalogue is the one home of the metrics' names: every list of metrics is
derived from it, and every metric it has reaches the summary, the terminal report,
report.html and the web tab where its record says it goes."""

from __future__ import annotations

import numpy as np
import pytest

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.harness import webui
from tpot_locust.metrics import collector, metric_set
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report import compare, gate, html, summary, truth_check
from tpot_locust.report.summary import build_summary, format_report
from tpot_locust.scenario import slo


def test_every_list_of_metrics_is_the_catalogues() -> None:
    assert metric_set.METRICS == catalogue.names()
    assert metric_set.STALL_METRICS == gate._TAGGED == catalogue.names("stall_tagged")
    assert metric_set.PHASE_METRICS == catalogue.names("phased")
    assert metric_set.CAUSE_METRICS == catalogue.names("causes")
    assert slo.LATENCY_METRICS == catalogue.names("gateable")
    assert slo.GOODPUT_METRICS == catalogue.names("goodput")
    assert html.TABLE_METRICS == catalogue.names("in_table")
    assert compare.DEFAULT_METRICS == catalogue.names("in_compare")
    assert truth_check.CHECKED_METRICS == catalogue.names("truth_checked")
    assert set(summary.TITLES) == set(catalogue.names())
    assert webui.TAB_METRICS == catalogue.names("in_tab")
    assert collector.TIMESERIES_METRICS == catalogue.names("in_timeseries")


def test_the_names_are_unique_and_a_flag_must_exist() -> None:
    assert len(set(catalogue.names())) == len(catalogue.CATALOGUE)
    with pytest.raises(KeyError):
        catalogue.names("gatable")


def full_summary() -> dict:
    totals = MetricSet()
    metrics = totals.for_group("chat")
    metrics.counters.ok = 1
    metrics.counters.reasoning_requests = metrics.counters.reasoning_tokens = 1  # TTFAT shows
    for name in catalogue.names():
        record_many(metrics.histogram(name), np.full(50, 4_000))
    return build_summary(totals)


def test_every_metric_reaches_the_summary_and_the_terminal_report() -> None:
    built = full_summary()
    report = format_report(built)
    for metric in catalogue.CATALOGUE:
        assert built["metrics"][metric.name]["count"] == 50, metric.name
        assert metric.title in report, metric.name


def test_every_table_metric_reaches_report_html() -> None:
    built = full_summary()
    page = "\n".join(html._tables(built))
    for name in catalogue.names("in_table"):
        assert f"<td>{catalogue.BY_NAME[name].short}</td>" in page, name
