"""Reasoning, answer and cached prompt tokens, TTFAT and where k_i came from: checked on a
request, recorded per class, merged across workers, reported; and ``n > 1`` refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.errors import CLIENT_ERROR
from tpot_locust.common.timings import COUNT_SOURCES, RequestTimings
from tpot_locust.harness.run.worker_deltas import pack_delta, unpack_delta
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.metric_set import COUNT_SOURCE_COUNTERS, ClassCounters, MetricSet
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.report.html import RunView, render_report
from tpot_locust.report.summary import build_summary
from tpot_locust.report.terminal_report import format_report
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.value_checks import CHOICES_REFUSED
from tpot_locust.scenario.yaml_source import ScenarioError

MS = 1_000_000


def timings(
    request_id: str = "r",
    send: int = 0,
    gaps_ms: tuple[int, ...] = (100, 10, 10, 10),
    reasoning_events: int = 0,
    cached: int | None = None,
    source: str = "usage",
) -> RequestTimings:
    """A successful request: its first token ``gaps_ms[0]`` after the send, one token per
    event, its first ``reasoning_events`` events reasoning."""
    send = send or stamp_ns()
    request = RequestTimings("chat", "chat", request_id, send, send)
    stamp = send
    for gap in gaps_ms:
        stamp += gap * MS
        request.token_stamps.append(stamp)
        request.token_counts.append(1)
    request.output_tokens = len(gaps_ms)
    request.reasoning_tokens = reasoning_events
    if reasoning_events < len(gaps_ms):
        request.answer_stamp_ns = request.token_stamps[reasoning_events]
    request.prompt_tokens_requested, request.prompt_tokens_reported = 90, 100
    request.cached_prompt_tokens = cached
    request.count_source = source
    request.counts_from_usage = source != "events"
    request.finish_reason, request.t_end_ns = "stop", stamp
    return request


# --- the request's own numbers ------------------------------------------------------------


def test_ttfat_is_the_first_answer_event_and_ttft_without_reasoning() -> None:
    reasoning = timings(reasoning_events=2)  # answer from the third event: 100+10+10 ms
    assert reasoning.ttft_ns == 100 * MS and reasoning.ttfat_ns == 120 * MS
    plain = timings()
    assert plain.ttfat_ns == plain.ttft_ns == 100 * MS
    plain.answer_stamp_ns = None  # a locustfile's own timings: no reasoning, so every event
    assert plain.ttfat_ns == 100 * MS
    only_reasoning = timings(reasoning_events=4)  # no answer token at all
    assert only_reasoning.answer_stamp_ns is None and only_reasoning.ttfat_ns is None


def test_the_defaults_say_nothing_was_reported() -> None:
    request = RequestTimings("chat", "chat", "r", 0, 0)
    assert (request.count_source, request.answer_stamp_ns) == ("events", None)
    assert (request.reasoning_tokens, request.cached_prompt_tokens) == (0, None)
    assert set(COUNT_SOURCE_COUNTERS) == set(COUNT_SOURCES)
    names = {name for name in ClassCounters.__dataclass_fields__}
    assert set(COUNT_SOURCE_COUNTERS.values()) <= names


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("reasoning_tokens", -1),
        ("reasoning_tokens", 10**10),
        ("reasoning_tokens", True),
        ("reasoning_tokens", None),
        ("cached_prompt_tokens", -5),
        ("cached_prompt_tokens", "12"),
        ("cached_prompt_tokens", 10**400),
        ("answer_stamp_ns", 2**70),
        ("answer_stamp_ns", 1.5),
        ("count_source", "guessed"),
        ("count_source", "x" * 10_000),
        ("count_source", None),
    ],
)
def test_a_number_no_request_can_have_is_refused_and_zeroed(name: str, value: object) -> None:
    request = timings(reasoning_events=1, cached=40)
    setattr(request, name, value)
    assert request.out_of_range() == name
    assert request.refuse_out_of_range()
    assert request.error_category == CLIENT_ERROR and name in (request.error_message or "")
    assert len(request.error_message or "") < 200
    assert (request.reasoning_tokens, request.cached_prompt_tokens) == (0, None)
    assert (request.answer_stamp_ns, request.count_source) == (None, "events")
    assert request.out_of_range() is None


def test_a_plausible_request_is_in_range() -> None:
    request = timings(reasoning_events=1, cached=0, source="logprobs")
    assert request.out_of_range() is None and not request.refuse_out_of_range()


# --- recorded per class and merged -------------------------------------------------------


def recorded(*requests: RequestTimings) -> MetricSet:
    recorder = Recorder()
    for request in requests:
        recorder.record(request)
    return recorder.take_interval(final=True)


def test_the_recorder_counts_reasoning_answers_the_cache_and_the_sources() -> None:
    delta = recorded(
        timings("a", reasoning_events=2, cached=60),
        timings("b", cached=0, source="token_ids"),
        timings("c", source="events"),
        timings("d", reasoning_events=4),  # reasoning only: no TTFAT sample
    )
    metrics = delta.classes["chat"]
    counters = metrics.counters
    assert (counters.ok, counters.output_tokens) == (4, 16)
    assert (counters.reasoning_tokens, counters.answer_tokens) == (6, 10)
    assert counters.reasoning_requests == 2
    assert (counters.cached_prompt_tokens, counters.cache_reported_requests) == (60, 2)
    assert counters.cache_reported_prompt_tokens == 200  # the server's counts of a and b
    assert counters.count_sources() == {"usage": 2, "token_ids": 1, "events": 1}
    ttft, ttfat = metrics.histograms["ttft"], metrics.histograms["ttfat"]
    assert ttft.total_count == 4 and ttfat.total_count == 3
    assert histogram_stats(ttfat, ()).max // 1000 == 120  # a's answer, after its reasoning


def test_a_failed_request_adds_no_reasoning_cache_or_source() -> None:
    failed = timings(reasoning_events=2, cached=60)
    failed.error_category = "truncated"
    counters = recorded(failed).classes["chat"].counters
    assert counters.failed == 1  # its first answer came: its TTFAT counts, as its gaps
    assert recorded(failed).classes["chat"].histograms["ttfat"].total_count == 1
    assert counters.reasoning_tokens == counters.cache_reported_requests == 0
    assert counters.count_sources() == {}


def test_the_counts_and_ttfat_merge_across_workers_through_the_delta() -> None:
    one = recorded(timings("a", reasoning_events=2, cached=60))
    two = recorded(timings("b", cached=20, source="token"), timings("c"))
    totals = MetricSet()
    for delta in (one, two):
        unpack_delta("worker", pack_delta(delta)).add_to(totals)
    counters = totals.classes["chat"].counters
    assert (counters.reasoning_tokens, counters.answer_tokens) == (2, 10)
    assert (counters.cached_prompt_tokens, counters.cache_reported_requests) == (80, 2)
    assert counters.count_sources() == {"usage": 2, "token": 1}
    assert totals.classes["chat"].histograms["ttfat"].total_count == 3
    older = ClassCounters.from_dict({"ok": 3})  # a delta or file without the new counters
    assert older.reasoning_tokens == 0 and older.count_sources() == {}


# --- the summary and the report ------------------------------------------------------------


def test_the_summary_and_report_show_them_where_there_are_some() -> None:
    summary = build_summary(
        recorded(timings("a", reasoning_events=2, cached=60), timings("b", source="events"))
    )
    tokens = summary["tokens"]
    assert (tokens["reasoning"], tokens["answer"], tokens["reasoning_requests"]) == (2, 6, 1)
    assert tokens["prompt_cache"] == {"requests": 1, "cached": 60, "prompt": 100, "hit_rate": 0.6}
    assert tokens["count_source"] == {"usage": 1, "events": 1}
    assert summary["metrics"]["ttfat"]["count"] == 2
    assert summary["classes"]["chat"]["tokens"]["prompt_cache"]["hit_rate"] == 0.6
    report = format_report(summary)
    assert "reasoning tokens 2 in 1 requests, answer tokens 6" in report
    assert "prefix cache: 60 of 100 prompt tokens cached (60.0 %), over the 1 requests" in report
    assert "tokens per event counted from (requests): usage 1, events 1" in report
    assert "TTFAT: send -> first answer token event" in report


def test_a_plain_run_reports_none_of_them() -> None:
    summary = build_summary(recorded(timings("a"), timings("b")))
    tokens = summary["tokens"]
    assert tokens["reasoning"] == tokens["reasoning_requests"] == 0
    assert tokens["prompt_cache"] is None and tokens["count_source"] == {"usage": 2}
    assert summary["metrics"]["ttfat"]["count"] == 2  # kept: it compares with TTFT
    report = format_report(summary)
    for absent in ("reasoning", "prefix cache", "counted from", "TTFAT"):
        assert absent not in report


def test_report_html_shows_them_where_there_are_some() -> None:
    reasoned = recorded(timings("a", reasoning_events=2, cached=60))
    page = render_report([RunView("r", build_summary(reasoned), reasoned)])
    assert "<td>TTFAT</td>" in page and "prefix cache: 60 of 100 prompt tokens" in page
    plain = recorded(timings("a"))
    page = render_report([RunView("p", build_summary(plain), plain)])
    assert "TTFAT" not in page and "prefix cache" not in page


# --- n > 1 ---------------------------------------------------------------------------------

BASE = (
    "duration: 2s\nserver:\n  extra_body:\n    temperature: 0\n{n}classes:\n  chat:\n    users: 1\n"
)


@pytest.mark.parametrize("value", ["2", "0", "'1'", "true", "1.0"])
def test_extra_body_with_n_other_than_1_is_refused_where_it_stands(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE.format(n=f"    n: {value}\n"))
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    assert str(raised.value) == f"{path}:5:5: server.extra_body.n: {CHOICES_REFUSED}"
    assert str(raised.value).endswith(
        "n > 1 is not measured: each choice would need its own stream timing; remove n"
    )


def test_extra_body_with_n_1_or_none_loads(tmp_path: Path) -> None:
    for n in ("    n: 1\n", ""):
        path = tmp_path / "s.yaml"
        path.write_text(BASE.format(n=n))
        assert load_scenario(path).server.extra_body is not None
