"""The metric catalogue is the one home of the metrics' names: every list of metrics is
derived from it, the real recorder makes exactly the histograms it declares (a name it
does not declare fails), and every metric it has reaches the summary, the terminal
report, report.html and the web tab where its record says it goes."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from tests.helpers.every_histogram import every_histogram_run
from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.harness.web import web_tab
from tpot_locust.metrics import collector, histogram_names, metric_set
from tpot_locust.metrics.histogram_names import DECLARED, UndeclaredHistogram
from tpot_locust.metrics.metric_set import ClassCounters, ClassMetrics, MetricSet
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.metrics.samples import GAP_SAMPLES
from tpot_locust.report import compare, gate, html, metric_figures, truth_check
from tpot_locust.report.summary import build_summary
from tpot_locust.report.terminal_report import format_report
from tpot_locust.scenario import slo


def test_every_list_of_metrics_is_the_catalogues() -> None:
    assert histogram_names.METRICS == catalogue.names()
    assert histogram_names.STALL_METRICS == gate._TAGGED == catalogue.names("stall_tagged")
    assert histogram_names.PHASE_METRICS == catalogue.names("phased")
    assert histogram_names.CAUSE_METRICS == catalogue.names("causes")
    assert slo.LATENCY_METRICS == catalogue.names("gateable")
    assert slo.GOODPUT_METRICS == catalogue.names("goodput")
    assert html.TABLE_METRICS == catalogue.names("in_table")
    assert compare.DEFAULT_METRICS == catalogue.names("in_compare")
    assert truth_check.CHECKED_METRICS == catalogue.names("truth_checked")
    assert set(metric_figures.TITLES) == set(catalogue.names())
    assert web_tab.TAB_METRICS == catalogue.names("in_tab")
    assert collector.TIMESERIES_METRICS == catalogue.names("in_timeseries")


def test_the_names_are_unique_and_a_flag_must_exist() -> None:
    assert len(set(catalogue.names())) == len(catalogue.CATALOGUE)
    with pytest.raises(KeyError):
        catalogue.names("gatable")


def test_each_record_says_its_unit_its_kind_and_what_a_stall_must_overlap() -> None:
    for record in (*catalogue.CATALOGUE, *catalogue.AUXILIARY):
        assert record.kind == catalogue.HISTOGRAM, record.name
        assert record.unit in (catalogue.US, catalogue.TOKENS), record.name
        assert bool(record.stall_span) == record.stall_tagged, record.name
        assert (record.stall_span == catalogue.GAP) <= record.per_token, record.name
    # the per-gap metrics are measured per gap (``samples``); only they are tagged per gap
    assert set(GAP_SAMPLES) == set(catalogue.names("per_token"))
    assert set(catalogue.names("phased")) | set(catalogue.names("causes")) <= set(GAP_SAMPLES)


@pytest.fixture(scope="module")
def run() -> MetricSet:
    return every_histogram_run()


def test_the_recorder_makes_every_declared_histogram_and_no_other(run: MetricSet) -> None:
    """Real timings through the real recorder (and the wire form): every histogram the
    catalogue declares, with its copies, has samples, and no other exists."""
    made = {
        name
        for metrics in run.groups.values()
        for name, histogram in metrics.histograms.items()
        if histogram.total_count
    }
    assert made == DECLARED, (sorted(DECLARED - made), sorted(made - DECLARED))
    assert {name.split("@")[0] for name in made} == {
        record.name for record in (*catalogue.CATALOGUE, *catalogue.AUXILIARY)
    }


def test_a_misspelt_histogram_fails_where_it_is_first_used() -> None:
    with pytest.raises(UndeclaredHistogram, match="tpot@brust"):
        ClassMetrics().histogram("tpot@brust")
    recorder = Recorder()
    recorder.add_samples("chat", "tpto", np.array([1_000]))
    with pytest.raises(UndeclaredHistogram, match="tpto"):
        recorder.take_interval()
    # saved results keep the names the version that saved them wrote (``tpot@steady``)
    saved = MetricSet()
    saved.for_group("chat").merged_into("tpot@steady").record_value(1_000)
    merged = MetricSet()
    merged.add(MetricSet.decode(saved.encode()))
    assert merged.for_group("chat").histograms["tpot@steady"].total_count == 1


def test_every_metric_reaches_the_summary_and_the_terminal_report(run: MetricSet) -> None:
    built = build_summary(run)
    report = format_report(built)
    for metric in catalogue.CATALOGUE:
        assert built["metrics"][metric.name]["count"] > 0, metric.name
        assert metric.title in report, metric.name


def test_every_table_metric_reaches_report_html(run: MetricSet) -> None:
    built = build_summary(run)
    page = "\n".join(html._tables(built))
    for name in catalogue.names("in_table"):
        assert f"<td>{catalogue.BY_NAME[name].short}</td>" in page, name


def test_a_misspelt_counter_fails_and_every_counter_named_in_text_is_declared() -> None:
    counters = ClassCounters()
    with pytest.raises(AttributeError):
        counters.okk = 1  # type: ignore[attr-defined]
    declared = {f.name for f in fields(ClassCounters)}
    named = {
        *metric_set.CUT_WHERE.values(),
        *metric_set.ARRIVAL_CLOCK_COUNTERS.values(),
        *metric_set.COUNT_SOURCE_COUNTERS.values(),
        *metric_set._MERGE_RULES,
    }
    assert named <= declared, sorted(named - declared)
