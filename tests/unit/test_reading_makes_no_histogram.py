"""Reading a metric never makes its histogram (``ClassMetrics.read``): a summary over a
results file of many small classes had made one a metric a class (~185 KiB each), and 500
classes took 1.2 GB (0.43 GB now, the file's own histograms)."""

from __future__ import annotations

import pytest

from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histogram_names import UndeclaredHistogram
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.report.summary import build_summary


def test_a_summary_adds_no_histogram_to_what_it_reads() -> None:
    totals = MetricSet()
    for index in range(3):
        totals.for_group(f"class-{index}").histogram("itl").record_value(2000 + index)
    build_summary(totals, RunFacts())
    assert [sorted(part.histograms) for part in totals.groups.values()] == [["itl"]] * 3
    empty = ClassMetrics().read("tpot")
    assert empty.total_count == 0  # the shared empty one: no reader wrote into it


def test_an_undeclared_name_is_refused_when_read_too() -> None:
    with pytest.raises(UndeclaredHistogram):
        ClassMetrics().read("tpot_typo")
