"""The simulator's GET /metrics against its own truth file: a real process, real streams."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from bisect import bisect_left
from pathlib import Path
from typing import Any

import pytest

from tpot_locust.sim.process import SimProcess, start_simulator
from tpot_locust.sim.prometheus import ITL_BUCKETS_S
from tpot_locust.sim.truth import read_truth

BASE = (("engine", "0"), ("model_name", "tpot-sim"))
SAMPLE = re.compile(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$")
PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
Values = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(values: Values, name: str, **labels: str) -> float:
    """A sample of the one engine (``engine="0"``, the served model)."""
    return values[name, frozenset(BASE + tuple(labels.items()))]


def post(sim: SimProcess, request_id: str, words: int, tokens: int, stream: bool) -> bytes:
    """One chat completion read to its end (``ignore_eos``: exactly ``tokens`` tokens)."""
    body = {
        "model": "tpot-sim",
        "stream": stream,
        "max_tokens": tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "word " * words}],
    }
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=30)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            json.dumps(body),
            {"Content-Type": "application/json", "X-Request-Id": request_id},
        )
        response = conn.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        conn.close()


def post_all(sim: SimProcess, requests: list[tuple[str, int, int, bool]]) -> None:
    """All at once, one thread each (other test modules gevent-patch this process)."""
    errors: list[BaseException] = []

    def run(args: tuple[str, int, int, bool]) -> None:
        try:
            post(sim, *args)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


def scrape(sim: SimProcess) -> tuple[str, Values]:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("content-type") == "text/plain; version=0.0.4; charset=utf-8"
        text = response.read().decode("utf-8")
    finally:
        conn.close()
    values: Values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, line
            name, labels, value = match.groups()
            values[name, frozenset(PAIR.findall(labels or ""))] = float(value)
    return text, values


def wait_truth(sim: SimProcess, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while True:
        records = [r for r in sim.read_truth() if "request_id" in r]
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def check_against_truth(values: Values, records: list[dict[str, Any]]) -> None:
    """Counters and histograms equal what the truth file says was sent."""

    def value(name: str, **labels: str) -> float:
        return get(values, name, **labels)

    assert value("vllm:generation_tokens_total") == sum(r["completion_tokens"] for r in records)
    assert value("vllm:prompt_tokens_total") == sum(r["prompt_tokens"] for r in records)
    assert value("vllm:request_success_total", finished_reason="length") == len(records)
    gaps = [b - a for r in records for a, b in zip(r["send_ns"], r["send_ns"][1:], strict=False)]
    itl = "vllm:inter_token_latency_seconds"
    assert value(f"{itl}_count") == len(gaps)
    assert value(f"{itl}_sum") == pytest.approx(sum(gaps) / 1e9, rel=1e-9)
    bounds_ns = [round(b * 1e9) for b in ITL_BUCKETS_S]
    expected = [0] * (len(bounds_ns) + 1)
    for gap in gaps:
        expected[bisect_left(bounds_ns, gap)] += 1
    cumulative = 0
    for bound, count in zip(ITL_BUCKETS_S, expected, strict=False):
        cumulative += count
        assert value(f"{itl}_bucket", le=repr(bound)) == cumulative, bound
    ttfts = [r["send_ns"][0] - r["arrival_ns"] for r in records]
    assert value("vllm:time_to_first_token_seconds_count") == len(records)
    ttft_sum = value("vllm:time_to_first_token_seconds_sum")
    assert ttft_sum == pytest.approx(sum(ttfts) / 1e9, rel=1e-9)
    e2e_sum = value("vllm:e2e_request_latency_seconds_sum")
    assert e2e_sum == pytest.approx(sum(r["send_ns"][-1] - r["arrival_ns"] for r in records) / 1e9)
    assert value("vllm:num_requests_running") == 0
    assert value("vllm:num_requests_waiting") == 0


def parse_check(text: str) -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    for name, kind in (
        ("vllm:num_requests_running", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:num_preemptions", "counter"),
        ("vllm:generation_tokens", "counter"),
        ("vllm:inter_token_latency_seconds", "histogram"),
        ("vllm:iteration_tokens_total", "histogram"),
    ):
        assert families[name].type == kind, name


@pytest.mark.timeout(60)
def test_gap_mode_metrics_equal_the_truth(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5", truth=truth) as sim:
        _, before = scrape(sim)
        assert get(before, "vllm:generation_tokens_total") == 0
        requests = [(f"g{i}", 10 + i, 30 + i, i != 3) for i in range(6)]  # g3: not streamed
        post_all(sim, requests)
        text, values = scrape(sim)
        records = wait_truth(sim, len(requests))
    assert len(records) == len(requests)
    check_against_truth(values, records)
    assert get(values, "vllm:kv_cache_usage_perc") == 0
    assert get(values, "vllm:num_preemptions_total") == 0
    assert get(values, "vllm:iteration_tokens_total_count") == 0  # no engine steps
    parse_check(text)


@pytest.mark.timeout(60)
def test_engine_mode_metrics_equal_the_truth_and_show_preemptions(tmp_path: Path) -> None:
    truth, steps_file = tmp_path / "truth.jsonl", tmp_path / "steps.jsonl"
    args = [
        "--profile",
        "cpu-slow",
        "--set",
        "step_base_ms=1",
        "--set",
        "decode_ms_per_seq=0",
        "--set",
        "prefill_ms_per_token=0.001",
        "--set",
        "frontend_ms=0",
        "--set",
        "stall_prob=0",
        "--kv-cache-tokens",
        "1024",
        "--max-model-len",
        "1024",
        "--steps",
        str(steps_file),
    ]
    with start_simulator(*args, truth=truth) as sim:
        requests = [(f"kv{i}", 100, 200, True) for i in range(8)]
        during: list[Values] = []
        sampler_stop = threading.Event()

        def sample() -> None:
            while not sampler_stop.is_set():
                during.append(scrape(sim)[1])
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        post_all(sim, requests)
        sampler_stop.set()
        sampler.join(5)
        text, values = scrape(sim)
        records = wait_truth(sim, len(requests))
        time.sleep(0.25)  # the step log flushes within 100 ms
    steps = [s for s in read_truth(steps_file) if s.get("type") == "step"]
    assert len(records) == len(requests)
    check_against_truth(values, records)
    preempted = sum(len(s["preempted"]) for s in steps)
    assert preempted > 0, "8 x 300 tokens do not fit 1024 KV tokens"
    assert get(values, "vllm:num_preemptions_total") == preempted
    assert get(values, "vllm:kv_cache_usage_perc") == 0
    iteration = "vllm:iteration_tokens_total"
    assert get(values, f"{iteration}_count") == len(steps)
    prompts = sum(r["prompt_tokens"] for r in records)
    assert get(values, f"{iteration}_sum") == sum(s["emitted"] for s in steps) + prompts
    phases = {
        "queue": [r["queue_ns"] for r in records],
        "prefill": [r["prefill_end_ns"] - r["scheduled_ns"] for r in records],
        "decode": [r["send_ns"][-1] - r["prefill_end_ns"] for r in records],
    }
    for phase, ns in phases.items():
        name = f"vllm:request_{phase}_time_seconds"
        assert get(values, f"{name}_count") == len(records)
        assert get(values, f"{name}_sum") == pytest.approx(sum(ns) / 1e9, rel=1e-9), phase
    busy = [v for v in during if get(v, "vllm:num_requests_running") > 0]
    assert busy, "no scrape saw a running request"
    assert max(get(v, "vllm:kv_cache_usage_perc") for v in busy) > 0.5
    assert all(0 <= get(v, "vllm:kv_cache_usage_perc") <= 1 for v in during)
    parse_check(text)
