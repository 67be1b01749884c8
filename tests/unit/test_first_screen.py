"""The terminal's first screen (issue 46, item 1): the seed's table and a line each for the
rest, in at most 30 lines of 100 columns, whatever the run said."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.first_screen import WIDTH, first_screen
from tpot_locust.report.html import RunView, render_report
from tpot_locust.report.summary import build_summary
from tpot_locust.report.summary_types import Summary


def summary_of(itl_like_tpot: bool = True, **counts: int) -> Summary:
    totals = MetricSet()
    metrics = totals.for_group("chat")
    metrics.counters.ok, metrics.counters.failed = counts.get("ok", 40), counts.get("failed", 0)
    metrics.counters.errors["connection_error"] = counts.get("failed", 0)
    gaps = np.random.default_rng(1).lognormal(7.5, 0.6, 20_000).astype(np.int64)
    record_many(metrics.histogram("tpot"), gaps)
    record_many(metrics.histogram("itl"), gaps if itl_like_tpot else gaps * 2)
    record_many(metrics.histogram("ttft"), np.full(40, 25_000))
    record_many(metrics.histogram("e2e"), np.full(40, 280_000))
    return build_summary(totals, run=RunFacts(scenario="quickstart"))


def truth(worst_ms: float, passed: bool | None, tolerance_ms: float | None) -> dict:
    coverage = {"measured": 20_000, "true": 20_000, "share": 1.0}
    return {
        "worst_error_ms": worst_ms,
        "passed": passed,
        "tolerance_ms": tolerance_ms,
        "coverage": coverage,
    }


def test_the_first_screen_holds_the_seeds_table_in_30_lines_of_100_columns() -> None:
    summary = summary_of()
    summary["truth_check"] = truth(0.012, None, None)
    screen = first_screen(summary, Path("out/report.txt"), Path("out/report.html"))
    assert len(screen) <= 30 and max(map(len, screen)) <= WIDTH, screen
    assert screen[0] == "=== tpot-locust: quickstart: no SLO gated this run ==="
    labels = [line.split()[0] for line in screen if line.startswith("  ")]
    for label in ("mean", "median", "P90", "P99", "P99.9", "P99.99", "max"):
        assert label in labels, label
    assert "tokens/s" in screen[3] + screen[4] and "samples above" in screen[4]
    assert "ITL: the same as TPOT (one token per event)" in screen
    assert any(line.startswith("TTFT: median 25.0") for line in screen)
    assert any(line.startswith("truth check: every TPOT, ITL and TTFT figure") for line in screen)
    assert screen[-2:] == [
        "tpot-locust: full report out/report.txt",
        "tpot-locust: report.html out/report.html",
    ]


def test_itl_is_shown_apart_where_it_differs_and_errors_and_verdicts_are_named() -> None:
    summary = summary_of(itl_like_tpot=False, failed=3)
    summary["slo"] = {"verdict": "fail", "exit_code": 1, "checks": []}
    screen = first_screen(summary)
    assert screen[0] == "=== tpot-locust: quickstart: SLO verdict FAIL (exit 1) ==="
    assert screen[1].startswith("requests ok 40, failed 3 (connection_error 3)")
    assert any(line.startswith("ITL:  median") for line in screen)
    step = first_screen(summary, sweep_step=True)[0]
    assert "FAIL" not in step and "a step of a sweep" in step


def test_a_failed_truth_check_and_the_reports_warnings_reach_the_first_screen() -> None:
    summary = summary_of()
    summary["truth_check"] = truth(2.5, False, 0.1)
    summary["report_error"] = "verdict: ValueError: " + "x" * 300  # a long one is wrapped
    screen = first_screen(summary)
    assert any(line.startswith("! truth check FAILED: 2.500 ms") for line in screen)
    assert any(line.startswith("REPORT INCOMPLETE") for line in screen)
    assert max(map(len, screen)) <= WIDTH


def test_report_html_opens_on_the_card_and_holds_no_python_literal() -> None:
    summary = summary_of(failed=2)
    summary["truth_check"] = truth(0.012, None, None)
    page = render_report([RunView("quickstart", summary, MetricSet())])
    body = page.split("<body>", 1)[1]
    assert body.index('<section class="card"') < body.index("<details")
    assert "ITL: the same as TPOT" in body and "TPOT as tokens/s" in body
    text = re.sub(r"<[^>]+>", " ", body)
    assert not re.findall(r"\b(?:None|True|False|nan|inf)\b|\{'|'\}|\[\]", text)
