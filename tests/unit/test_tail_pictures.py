"""Why the tail, drawn: report.html's section, the tail's timeline and the live page's panels,
from a synthetic summary (hostile strings, missing parts and oversized series included)."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.charts import MAX_TIMELINE_POINTS, RIGHT, WIDTH
from tpot_locust.report.html import RunView, render_report
from tpot_locust.report.live_charts import charts_fragment
from tpot_locust.report.summary import build_summary
from tpot_locust.report.tail_pictures import has_tail_facts, tail_timeline, why_the_tail
from tpot_locust.report.tail_tables import bucket_text, coarseness

SVG = "{http://www.w3.org/2000/svg}"
START = 1_700_000_000.0
HOSTILE = '<script>alert(1)</script>"\x1b[2J\u202e&'


def _totals() -> MetricSet:
    totals = MetricSet()
    metrics = totals.for_group("chat")
    metrics.counters.ok = 100
    rng = np.random.default_rng(7)
    for name in ("tpot", "itl"):
        record_many(metrics.histogram(name), rng.exponential(2000, 20_000) + 1)
    return totals


def _gap(index: int, causes: list[str], request_id: str = "") -> dict[str, Any]:
    prefill = "prefill" in causes
    return {
        "ms": 200.0 - index,
        "at_wall_s": START + 1 + index * 0.5,
        "request_id": request_id or f"r{index}",
        "gap": index,
        "causes": causes,
        "prefill_tokens": 16_000 if prefill else 0,
        "prefill_requests": 2 if prefill else 0,
        "phase": "steady",
        "client_stall": False,
    }


def _summary(server: bool = True) -> dict[str, Any]:
    totals = _totals()
    summary = build_summary(totals)
    kinds = [["prefill"], ["preemption", "kv_pressure"], ["client_stall"], []]
    gaps = [_gap(i, kinds[i % 4]) for i in range(40)]
    gaps[0] = _gap(0, ["prefill", HOSTILE], request_id=HOSTILE)
    summary["timeseries"] = [
        {
            "t": float(t),
            "users": 4,
            "stalls": int(t == 9),
            "tpot": {"count": 9, "p50": 2.0, "p99": 6.0 + t % 3, "p99.9": 9.0},
            "itl": {"count": 9, "p50": 2.0, "p99": 7.0, "p99.9": 11.0 + t % 5},
        }
        for t in range(1, 31)
    ]
    summary["attribution"] = {
        "itl": {
            "p99": {
                "above_ms": 9.2,
                "samples": 200,
                "shares": {"prefill": 0.5, "preemption": 0.125, "none": 0.4},
            },
            "p99.9": {"above_ms": 15.0, "samples": 20, "shares": {"prefill": 0.9}},
        },
        "tpot": {"p99": {"above_ms": 7.25, "samples": 100, "shares": {"prefill": 0.6}}},
        "prefill_tokens": {"all_gaps_median": 0, "p99_median": 16_000, "p99.9_median": None},
        "worst": gaps[:10],
        "tail_gaps": gaps,
    }
    run: dict[str, Any] = {"start_wall_s": START}
    run["bursts"] = {"spans_s": [[10.0, 12.0]]}
    run["prefill"] = {
        "windows": 40,
        "long_prompt_tokens": 2048,
        "tokens_s": [[i * 0.5, (i % 5) * 4000] for i in range(60)],
    }
    if server:
        times = [START + 0.25 * i for i in range(1, 121)]
        run["server_metrics"] = {
            "url": f"http://h:8000/metrics?{HOSTILE}",
            "engine": "vllm",
            "interval_s": 0.25,
            "samples": 120,
            "slow": 1,
            "failed": 0,
            "notes": [f"odd reply: {HOSTILE}"],
            "series": {
                "t_wall_s": times,
                "running": [i % 8 for i in range(120)],
                "waiting": [i % 3 for i in range(120)],
                "kv_usage": [(i % 40) / 39 for i in range(120)],
                "preemptions": [1 if i == 4 else 0 for i in range(120)],
                "prompt_tokens_per_s": [None] * 120,
                "generation_tokens_per_s": [None] * 120,
            },
            "windows": {"preemption": 1, "kv_pressure": 9, "queueing": 80},
            "own_percentiles": {
                "itl": {
                    "count": 20_000,
                    "sum_s": 40.0,
                    "reset": False,
                    "p50": {"low_ms": 0.0, "high_ms": 10.0},
                    "p90": {"low_ms": 0.0, "high_ms": 10.0},
                    "p99": {"low_ms": 10.0, "high_ms": 25.0},
                    "p99.9": {"low_ms": 25.0, "high_ms": 50.0},
                    "p99.99": {"low_ms": 80_000.0, "high_ms": None},
                },
                "ttft": {"count": 0, "sum_s": 0.0, "reset": False, "p50": None},
            },
        }
    summary["run"] = RunFacts.from_json(run)
    return summary


def _report(summary: dict[str, Any]) -> str:
    return render_report([RunView("run", summary, _totals(), "name: run\n")])


def _svgs(summary: dict[str, Any]) -> list[ET.Element]:
    return [ET.fromstring(svg) for svg in tail_timeline(summary)]


def _titles(svg: ET.Element) -> list[str]:
    return [t.text or "" for t in svg.iter(f"{SVG}text") if t.get("class") == "title"]


@pytest.mark.parametrize(
    ("bounds", "shown"),
    [
        ({"low_ms": 0.0, "high_ms": 10.0}, "below 10 ms"),
        ({"low_ms": 10.0, "high_ms": 25.0}, "10-25 ms"),
        ({"low_ms": 0.1, "high_ms": 0.25}, "0.1-0.25 ms"),
        ({"low_ms": 500.0, "high_ms": 1000.0}, "500 ms-1 s"),
        ({"low_ms": 1000.0, "high_ms": 2500.0}, "1-2.5 s"),
        ({"low_ms": 80_000.0, "high_ms": None}, "above 80 s"),
        ({"low_ms": 0.0, "high_ms": None}, "no finite bucket"),
        (None, "-"),  # the histogram held nothing
        ({"low_ms": "10", "high_ms": 25.0}, "-"),
        ({"low_ms": 10.0, "high_ms": "junk"}, "-"),
        ({"low_ms": 25.0, "high_ms": 10.0}, "-"),
        ({"low_ms": True, "high_ms": 10.0}, "-"),
        ("10-25 ms", "-"),
    ],
)
def test_the_servers_figure_is_a_bucket_never_a_false_digit(bounds: Any, shown: str) -> None:
    assert bucket_text(bounds) == shown


def test_the_coarseness_line_says_which_percentiles_share_a_bucket() -> None:
    figures = _summary()["run"].server_metrics["own_percentiles"]["itl"]
    line = coarseness("ITL", figures)
    assert "p50, p90 below its first bound" in line
    assert "widest bucket shown is 10-25 ms (2.5x" in line
    assert "p99.99 past its last bound" in line
    same = {key: {"low_ms": 10.0, "high_ms": 25.0} for key in ("p50", "p90", "p99")}
    assert "p50, p90, p99 share one bucket (10-25 ms)" in coarseness("ITL", same)


def test_the_section_shows_shares_tokens_stories_timeline_and_the_servers_view() -> None:
    html = _report(_summary())
    section = html.split('<details id="why-the-tail" open>')[1].split("</details>")[0]
    assert "<summary><h2>Why the tail</h2></summary>" in html
    # shares of 0.5, 0.125 and 0.4 (a gap of both causes counted in each): parts of 100 %
    row = "<td>ITL p99</td><td>9.200</td><td>200</td><td>48.0 %</td><td>12.0 %</td><td>40.0 %</td>"
    assert row in section
    assert "<th>no cause</th>" in section and "Each row adds up to 100 %" in section
    assert "<td>prompt tokens in prefill, median of all</td><td>0</td><td>16,000</td>" in section
    assert "request r" not in section  # a request's id says nothing to a reader
    assert section.count("<li>") >= 10  # the worst gaps' stories (and the server's note)
    assert "200.0 ms at 1.0 s: 2 prompts in prefill (16,000 tokens, ours)" in section
    # the server's state in the story, from its sampled series
    assert "KV cache" in section and "preemption" in section
    # ours beside the server's bounds, and how coarse those are
    assert "What the server says about itself" in section
    assert "<td>below 10 ms</td><td>below 10 ms</td><td>10-25 ms</td><td>25-50 ms</td>" in section
    assert "<td>above 80 s</td>" in section
    assert "How coarse the server&#x27;s buckets are: ITL:" in section
    assert "TTFT the server" not in section  # its histogram held nothing: no row
    assert not re.search(r"(src|href)=|<script|@import", html)


def test_the_timeline_panels_share_one_time_axis_and_mark_the_gaps() -> None:
    svgs = _svgs(_summary())
    titles = [_titles(svg)[0] for svg in svgs]
    assert titles[0].startswith("The tail's timeline")
    assert titles[1] == "Prompt tokens in prefill (ours)"
    assert titles[2:] == [
        "Server (vllm): requests running and waiting",
        "Server (vllm): KV cache usage",
        "Server (vllm): preemptions per interval",
    ]
    ticks = [
        {t.text: t.get("x") for t in svg.iter(f"{SVG}text") if t.get("class") == "xtick"}
        for svg in svgs
    ]
    assert all(tick == ticks[0] for tick in ticks) and "30 s" in ticks[0]  # one x axis
    dots = [c for c in svgs[0].iter(f"{SVG}circle") if "gap" in (c.get("class") or "")]
    worst = [c for c in dots if "worst" in (c.get("class") or "")]
    assert len(worst) == 10 and all(c.find(f"{SVG}title") is not None for c in worst)
    kinds = {c.get("class", "").split()[1] for c in dots}
    assert kinds == {"gap-prefill", "gap-server", "gap-client", "gap-none"}
    assert len(dots) == 40 + len(kinds)  # every kept gap, and the legend's
    assert any(r.get("class") == "burst" for r in svgs[0].iter(f"{SVG}rect"))
    labels = [
        t for svg in svgs for t in svg.iter(f"{SVG}text") if "rule-label" in t.get("class", "")
    ]
    assert [t.text for t in labels] == ["long prompt 2,048", "KV pressure 95 %"]
    # in the legend, right of the plot: a label drawn inside it sat on the curve
    assert all(float(t.get("x", 0)) > WIDTH - RIGHT for t in labels)
    # a step line: every value holds until the next point (x repeats, y changes)
    steps = svgs[1].find(f"{SVG}polyline").get("points").split()  # type: ignore[union-attr]
    assert len(steps) == 2 * 60 - 1 and steps[1].split(",")[0] == steps[2].split(",")[0]


def test_without_server_metrics_only_our_panels_and_no_servers_table() -> None:
    summary = _summary(server=False)
    assert [_titles(svg)[0] for svg in _svgs(summary)][1:] == ["Prompt tokens in prefill (ours)"]
    section = "".join(why_the_tail(summary))
    assert "What the server says about itself" not in section and "Server (" not in section
    assert "200.0 ms at 1.0 s: 2 prompts in prefill" in section
    plain = _summary(server=False)
    for key in ("attribution",):
        plain.pop(key)
    plain["run"] = replace(plain["run"], prefill=None)
    assert not has_tail_facts(plain)
    assert "Why the tail" not in _report(plain)  # results of an older version


def test_hostile_strings_in_stories_notes_and_urls_are_escaped() -> None:
    html = _report(_summary())
    assert "<script>" not in html and "\x1b" not in html and "\u202e" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "\\u202e" in html  # a bidirectional override shown as an escape, not obeyed
    for svg in tail_timeline(_summary()):
        ET.fromstring(svg)  # well-formed: the story tooltips escaped too


def test_garbage_in_a_saved_summary_is_left_out_not_a_traceback() -> None:
    summary = _summary()
    server = summary["run"].server_metrics
    server["series"]["t_wall_s"][3] = "soon"
    server["series"]["kv_usage"] = ["full", None, float("nan"), *([0.5] * 117)]
    server["own_percentiles"]["itl"]["p99"] = {"low_ms": "x"}
    server["own_percentiles"]["ttft"] = "nothing"
    server["notes"] = [None, 7, "a note"]
    summary["attribution"]["worst"][1] = {"ms": "slow"}
    summary["attribution"]["tail_gaps"].append({"ms": float("inf"), "at_wall_s": None})
    summary["attribution"]["itl"]["p99"]["shares"] = {"prefill": "most"}
    summary["run"].prefill["tokens_s"] = [[1, 2, 3], "x", [0.5, 100]]
    summary["attribution_check"] = {
        "available": True,
        "causes": {"prefill": "?"},
        "thresholds": [None],
        "coverage": 3,
    }
    html = _report(summary)
    assert "<summary><h2>Why the tail</h2></summary>" in html and "a note" in html


def test_a_long_run_is_drawn_in_bounded_points() -> None:
    summary = _summary()
    summary["timeseries"] = [
        {
            "t": t * 0.5,
            "users": 4,
            "tpot": {"count": 1, "p99": 5.0},
            "itl": {"count": 1, "p99": 6.0 + (t == 7777) * 100, "p99.9": 8.0},
        }
        for t in range(20_000)
    ]
    summary["attribution"]["tail_gaps"] = [
        _gap(i % 900, ["prefill"]) | {"at_wall_s": START + i * 0.1} for i in range(5000)
    ]
    summary["run"].prefill["tokens_s"] = [[i * 0.5, i % 7] for i in range(20_000)]
    series = summary["run"].server_metrics["series"]
    for name in series:
        series[name] = (series[name] * 100)[:10_000]
    series["t_wall_s"] = [START + 0.25 * i for i in range(10_000)]
    for svg in _svgs(summary):
        for line in svg.iter(f"{SVG}polyline"):
            assert len(line.get("points", "").split()) <= 2 * MAX_TIMELINE_POINTS
        assert len(list(svg.iter(f"{SVG}circle"))) <= MAX_TIMELINE_POINTS + 4
    top = _svgs(summary)[0]
    heights = [float(t.text or 0) for t in top.iter(f"{SVG}text") if t.get("class") == "ytick"]
    assert max(heights) >= 106  # the spike at one interval of 20,000 kept through thinning
    assert len(_report(summary)) < 600_000


def test_the_attribution_check_is_shown_with_its_thresholds() -> None:
    summary = _summary()
    summary["attribution_check"] = {
        "available": True,
        "percentile": 99.9,
        "threshold_ms": 20.5,
        "tail_gaps": 30,
        "coverage": {"present": 29},
        "causes": {
            "prefill": {"true": 20, "tagged": 19, "both": 19, "precision": 1.0, "recall": 0.95},
            "preemption": {"true": 0, "tagged": 0, "both": 0, "precision": None, "recall": None},
        },
        "thresholds": [
            {"cause": "prefill", "measure": "recall", "at_least": 0.9, "value": 0.95, "met": True},
            {
                "cause": "preemption",
                "measure": "recall",
                "at_least": 0.8,
                "value": None,
                "met": None,
            },
        ],
        "true_tail_causes": {"prefill": 20, "preemption": 0, "stall": 0, "none": 10},
        "p99": {
            "percentile": 99.0,
            "threshold_ms": 9.0,
            "tail_gaps": 300,
            "present": 290,
            "ours_none": 0.02,
            "causes": {
                "server_pause": {
                    "true": 40,
                    "tagged": 36,
                    "both": 36,
                    "precision": 1.0,
                    "recall": 0.9,
                }
            },
        },
    }
    section = "".join(why_the_tail(summary))
    assert "True gaps above the true ITL P99.9 (20.500 ms): 30, of which 29" in section
    assert (
        "Above the true ITL P99 (9.000 ms): 300 true gaps, 290 in our kept gaps; ours "
        "named no cause for 2.0 %"
    ) in section
    assert "<td>server pause</td><td>40</td><td>36</td><td>36</td><td>1.00</td>" in section
    assert "<td>prefill</td><td>20</td><td>19</td><td>19</td><td>1.00</td><td>0.95</td>" in section
    assert '<span class="pass">met</span>' in section and "n/a" in section
    unavailable = copy.deepcopy(summary)
    unavailable["attribution_check"] = {"available": False, "why": f"no steps {HOSTILE}"}
    text = "".join(why_the_tail(unavailable))
    assert "Unavailable: no steps &lt;script&gt;" in text


def test_the_live_page_draws_the_tail_timeline_under_its_charts() -> None:
    summary = _summary()
    fragment = charts_fragment(summary, _totals(), running=True)
    timeline = fragment.split('<div class="timeline" id="tail-timeline">')[1]
    assert timeline.count("<svg") == 5 and "Server (vllm): KV cache usage" in timeline
    quiet = charts_fragment(_summary(server=False), _totals(), running=True)
    assert quiet.split('id="tail-timeline">')[1].count("<svg") == 2


def test_a_panel_with_nothing_to_show_is_left_out_and_said_so() -> None:
    """Issue 46: a server whose KV cache stayed empty and that preempted nothing gets no
    flat charts, and the section says which it left out."""
    summary = _summary()
    series = summary["run"].server_metrics["series"]
    series["kv_usage"] = [0.0] * 120
    series["preemptions"] = [0] * 120
    titles = [_titles(svg)[0] for svg in _svgs(summary)]
    assert not any("KV cache usage" in title or "preemptions" in title for title in titles)
    assert any("requests running and waiting" in title for title in titles)
    section = "".join(why_the_tail(summary))
    assert "Left out, nothing to show (zero throughout the run)" in section
    assert "KV cache usage" in section and "preemptions per interval" in section
