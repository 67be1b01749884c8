"""The terminal's first screen (issue 46, item 1): the seed's table and a line each for the
rest, in at most 30 lines of 100 columns, whatever the run said."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.first_screen import HEIGHT, WIDTH, first_screen, fit
from tpot_locust.report.html import RunView, render_report
from tpot_locust.report.summary import build_summary
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.verdict_files import format_verdict


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


# --- the whole end screen of real runs: 30 lines of 100 columns, gated or not (issue 53) ----

SAVED = Path(__file__).resolve().parents[1] / "data" / "summaries"


def saved(name: str) -> Summary:
    """A real run's summary.json (trimmed: its kept tail gaps, series and classes cut)."""
    document = json.loads((SAVED / f"{name}.json").read_text())
    document["run"] = RunFacts.from_json(document["run"])
    return cast(Summary, document)


def end_screen(summary: Summary, sweep_step: bool = False) -> list[str]:
    """What the terminal prints at the end of a run: the first screen, and under it the
    verdict's table where the run was gated (``cli.run_outcome``, ``report.run_end``)."""
    screen = first_screen(summary, Path("results/x/report.txt"), Path("results/x/report.html"))
    if verdict := summary.get("slo"):
        screen += [""] + format_verdict(verdict, sweep_step)
    return screen


def assert_fits(screen: list[str]) -> None:
    assert len(screen) <= HEIGHT == 30, "\n".join(screen)
    assert max(map(len, screen)) <= WIDTH == 100, "\n".join(screen)
    for line in screen:  # a value is never wrapped apart from its unit or its comparison
        assert not re.fullmatch(r"\s*(?:ms|s|%|>=|<=)?\s*[\d.,]*\s*(?:ms|s|%)\)?", line), line
        assert not line.rstrip().endswith((">=", "<=", " >", " <")), line


def _many_checks(summary: Summary) -> Summary:
    """The gated run's verdict with every kind of check: passed, failed, insufficient,
    invalid, reasons and warnings, more than the screen can hold one by one."""
    verdict = summary["slo"]
    failing = [
        check | {"verdict": "fail", "why": f"measured {ms} ms > limit 1 ms", "name": f"c{ms} p99"}
        for ms, check in enumerate(verdict["checks"] * 2, 2)
    ]
    summary["slo"] = verdict | {
        "checks": verdict["checks"] + failing,
        "run_invalid": verdict["run_invalid"] + ["worker(s) lost before their final report: vm#2"],
        "warnings": ["ttft p99 <= 2000 ms: 2 samples above p99 (insufficient: warn)"] * 3,
    }
    return summary


def _busy(summary: Summary) -> Summary:
    """Every warning the full report can raise at once, on a distributed run."""
    summary["workers"] = {"seen": 3, "reported_in_full": 2, "missing": ["vm#2"], "ids": {}}
    summary["complete"] = False
    summary["report_error"] = "verdict: ValueError: " + "x" * 300
    summary["run"] = replace(summary["run"], stopped_because="the server failed 50 times")
    summary["requests"]["interrupted"] = 12
    summary["window"]["cut"] = {"stop": 7, "timeout": 3, "reset": 1, "error": 1}
    summary["window"]["cut_elapsed_s_max"] = 24.93
    return summary


@pytest.mark.parametrize(
    "name", ["quickstart", "release-gate-truth-failed", "reasoning-none-finished", "prefill-burst"]
)
@pytest.mark.parametrize("change", [None, _many_checks, _busy])
def test_the_end_screen_of_real_runs_fits_30_lines_of_100_columns(
    name: str, change: Callable[[Summary], Summary] | None
) -> None:
    summary = saved(name)
    if change is _many_checks and not summary.get("slo"):
        summary["slo"] = saved("release-gate-truth-failed")["slo"]
    if change is not None:
        summary = change(summary)
    screen = end_screen(summary)
    assert_fits(screen)
    assert screen[0].startswith("=== tpot-locust: ") and screen.count("") <= 2
    assert any(line.lstrip().startswith("P99.99") for line in screen)  # the seed's table
    assert screen[-1].startswith(("tpot-locust: report.html", "  ", "=== SLO", "!"))
    assert_fits(end_screen(summary, sweep_step=True))


def test_a_gated_run_keeps_its_verdict_and_says_what_it_left_out() -> None:
    screen = end_screen(_many_checks(saved("release-gate-truth-failed")))
    assert_fits(screen)
    verdict = screen[screen.index("=== SLO verdict: INVALID (exit 3) ===") :]
    assert verdict[1].startswith("  PASS          5 of 18: tpot p50 <= 5 ms (1.999 ms), ")
    assert "(7,663.6 tokens/s)" in " ".join(verdict)  # a rate with its unit
    assert verdict[-1].endswith("more (checks, reasons, warnings): see summary.md")
    # a run stopped early, a worker lost: said whatever else is left out
    screen = end_screen(_busy(_many_checks(saved("release-gate-truth-failed"))))
    assert_fits(screen)
    for alarm in ("RUN STOPPED EARLY", "INCOMPLETE RUN"):
        assert any(line.startswith(alarm) for line in screen), alarm
    # not gated, each alarm in at most two lines, the rest cut ("...")
    screen = end_screen(_busy(saved("quickstart")))
    for alarm in ("RUN STOPPED EARLY", "REPORT INCOMPLETE", "INCOMPLETE RUN"):
        assert any(line.startswith(alarm) for line in screen), alarm
    assert any(line.endswith("xx ...") for line in screen)


def test_a_run_whose_answers_outlast_it_says_what_it_measured() -> None:
    screen = first_screen(saved("reasoning-none-finished"))
    assert screen[1] == (
        "requests: none finished (10 in flight at the stop)  |  2,434 tokens, "
        "490.9 tokens/s over 5.0 s"
    )
    assert not any("0.00 requests/s" in line for line in screen)
    assert (
        "streams cut mid-answer 10 (10 by the stop): their gaps count, E2E of the longest >= 14.9 s"
        in screen
    )


def test_a_stream_cut_before_it_was_timed_says_no_zero_seconds() -> None:
    summary = saved("reasoning-none-finished")
    summary["window"]["cut_elapsed_s_max"] = 0.0  # the web UI's Stop
    screen = first_screen(summary)
    assert "streams cut mid-answer 10 (10 by the stop): their gaps count" in screen
    assert not any(">= 0.0" in line for line in screen)


def test_why_the_tail_names_causes_for_people_in_shares_that_add_up() -> None:
    summary = saved("release-gate-truth-failed")  # saved shares 4.0 %, 58.4 %, 39.4 %: 101.8 %
    shares = summary["attribution"]["tpot"]["p99"]["shares"]
    assert sum(share for share in shares.values() if share) > 1.01
    (line,) = [line for line in first_screen(summary) if line.startswith("why the tail:")]
    assert line.endswith("server pause 57%, prefill 4%, no cause 39%"), line
    assert "_" not in line
    burst = saved("prefill-burst")  # every gap overlapped prefill, 94 % queueing too
    (line,) = [line for line in first_screen(burst) if line.startswith("why the tail:")]
    told = [int(share) for share in re.findall(r"(\d+)%", line)]
    assert sum(told) == 100, line


def test_the_simulator_behind_a_failed_truth_check_does_not_say_the_check_holds() -> None:
    summary = saved("release-gate-truth-failed")
    summary["truth_check"]["schedule"] |= {"behind": True, "late": 5_000, "late_share": 0.11}
    screen = first_screen(summary)
    failed = next(i for i, line in enumerate(screen) if line.startswith("! truth check FAILED"))
    behind = screen[failed + 1]
    assert behind.startswith("! simulator behind: 11.0%")
    said = " ".join(screen[failed + 1 : failed + 3])
    assert "holds" not in said and "failed the truth check" in said
    summary["truth_check"]["passed"] = None  # no tolerance: the check holds the gaps
    said = " ".join(first_screen(summary))
    assert "(the truth check holds them)" in said


def test_a_long_results_path_is_kept_whole_and_its_rows_counted() -> None:
    """A terminal wraps a path longer than its width: those rows count in the 30."""
    deep = Path("/tmp/pytest-of-someone/pytest-123/test_a_rather_long_name_of_a_test0/out")
    summary = _busy(saved("release-gate-truth-failed"))
    screen = first_screen(summary, deep / "report.txt", deep / "report.html")
    screen += [""] + format_verdict(summary["slo"])
    rows = sum(-(-len(line) // WIDTH) for line in screen if line) + screen.count("")
    assert rows <= HEIGHT, "\n".join(screen)
    assert f"tpot-locust: report.html {deep}/report.html" in screen


def test_fit_keeps_a_value_with_its_unit_and_its_comparison() -> None:
    line = "x" * 70 + " E2E of the longest >= 24.9 s, and 1,234 tokens/s over 5.0 s (57 %)"
    wrapped = fit(line)
    assert all(len(part) <= WIDTH for part in wrapped)
    assert any("longest >= 24.9 s" in part for part in wrapped), wrapped
    assert fit("short") == ["short"]


def test_report_html_says_what_a_person_reads() -> None:
    """Display names, not the summary's keys; no negative zero; the charts open; one row a
    name in the Run table; no request ids (issue 53)."""
    summary = saved("release-gate-truth-failed")
    for rows in summary["truth_check"]["metrics"].values():
        rows["p50"]["error"] = -0.0004  # rounds to nothing: no sign to tell
    page = render_report([RunView("gate", summary, MetricSet())])
    text = re.sub(r"<[^>]+>", " ", page.split("<body>", 1)[1])
    assert "-0.000" not in text and "+0.000" in text
    for key in ("server_pause", "kv_pressure", "server_gc", "gpu_throttle", "kv_offload"):
        assert key not in text, key
    assert "<th>no cause</th>" in page and "<th>none</th>" not in page
    assert "server pause" in text and "KV pressure 0" in text
    assert re.search(r"<td>TPOT</td><td>\+0\.000</td>", page) and "<td>tpot</td>" not in page
    for section in ("percentile-distributions", "over-time", "why-the-tail"):
        assert f'<details id="{section}" open>' in page, section
    assert page.count("<td>window</td>") == 1
    assert not any(gap["request_id"] in text for gap in summary["attribution"]["worst"])
    assert "measured 7,663.6 tokens/s &gt;= limit 100 tokens/s" in text
    # the prompt tokens in prefill: how many gaps met one, and how many tokens then
    assert "<td>gaps that overlapped a prefill</td><td>2.2 %</td>" in page
    assert "<td>prompt tokens in prefill, median of those</td><td>1,024</td>" in page
