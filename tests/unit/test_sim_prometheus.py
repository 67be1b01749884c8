"""The simulator's /metrics text: vLLM's names and buckets, the text format, values from stamps."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tpot_locust.common.clock import WallClock
from tpot_locust.server_state.snapshots import parse_snapshot
from tpot_locust.sim import response as response_module
from tpot_locust.sim.engine import EngineCore, Seq
from tpot_locust.sim.engine_stream import EngineStream
from tpot_locust.sim.profiles import engine_params
from tpot_locust.sim.prometheus import (
    CONTENT_TYPE,
    ITL_BUCKETS_S,
    Counter,
    Gauge,
    Histogram,
    Registry,
    SimMetrics,
    escape_label,
    format_value,
)
from tpot_locust.sim.request import SimRequest
from tpot_locust.sim.response import ResponseSetup

MS = 1_000_000
LABELS = (("model_name", "m"), ("engine", "0"))


Key = tuple[str, frozenset[tuple[str, str]]]
SAMPLE = re.compile(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$")
PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> dict[Key, float]:
    """(name, labels) -> value for every sample line (label values left escaped)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE.match(line)
            assert match, line
            name, labels, value = match.groups()
            out[name, frozenset(PAIR.findall(labels or ""))] = float(value)
    return out


def key(name: str, base: tuple[tuple[str, str], ...] = LABELS, **labels: str) -> Key:
    return name, frozenset(base + tuple(labels.items()))


def test_format_value_and_escaping() -> None:
    assert format_value(3) == "3.0"
    assert format_value(0.01) == "0.01"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("nan")) == "NaN"
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_counter_gauge_histogram_render() -> None:
    registry = Registry()
    counter = registry.add(Counter("x:things", "Things.\nTwo lines \\ here.", LABELS))
    registry.add(Gauge("x:level", "Level.", LABELS, read=lambda: 0.5))
    hist = Histogram("x:wait_seconds", "Wait.", LABELS, (0.01, 0.1), scale=1_000_000_000)
    registry.add(hist)
    assert isinstance(counter, Counter)
    counter.value += 2
    for ns in (5 * MS, 10 * MS, 50 * MS, 2_000 * MS):  # 10 ms exactly falls in le=0.01
        hist.observe(ns)
    text = registry.render().decode()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert "# HELP x:things_total Things.\\nTwo lines \\\\ here." in lines
    assert "# TYPE x:things_total counter" in lines
    assert "# TYPE x:things_created gauge" in lines
    assert "# TYPE x:level gauge" in lines
    assert "# TYPE x:wait_seconds histogram" in lines
    values = samples(text)
    assert 'x:things_total{engine="0",model_name="m"} 2.0' in lines  # labels sorted by name
    assert 'x:wait_seconds_bucket{engine="0",le="0.01",model_name="m"} 2.0' in lines
    assert values[key("x:level")] == 0.5
    assert values[key("x:wait_seconds_bucket", le="0.1")] == 3
    assert values[key("x:wait_seconds_bucket", le="+Inf")] == 4
    assert values[key("x:wait_seconds_count")] == 4
    assert values[key("x:wait_seconds_sum")] == pytest.approx(2.065)
    names = [line.split("{")[0] for line in lines if line.startswith("x:things")]
    assert names == ["x:things_total", "x:things_created"]
    assert lines.index("# TYPE x:wait_seconds histogram") < lines.index(
        'x:wait_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0'
    )


def test_vllm_names_types_and_buckets() -> None:
    metrics = SimMetrics('my "model"')
    text = metrics.render().decode()
    types = dict(
        line.split(" ")[2:4] for line in text.splitlines() if line.startswith("# TYPE")
    )  # name -> type
    expected = {
        "gauge": "vllm:num_requests_running vllm:num_requests_waiting vllm:kv_cache_usage_perc",
        "counter": "vllm:num_preemptions_total vllm:prompt_tokens_total "
        "vllm:generation_tokens_total vllm:request_success_total",
        "histogram": "vllm:time_to_first_token_seconds vllm:inter_token_latency_seconds "
        "vllm:e2e_request_latency_seconds vllm:iteration_tokens_total "
        "vllm:request_queue_time_seconds vllm:request_prefill_time_seconds "
        "vllm:request_decode_time_seconds vllm:request_inference_time_seconds",
    }
    for kind, names in expected.items():
        for name in names.split():
            assert types[name] == kind, name
    base = (("engine", "0"), ("model_name", 'my \\"model\\"'))  # escaped in the text
    values = samples(text)
    for reason in ("stop", "length", "abort"):
        assert values[key("vllm:request_success_total", base, finished_reason=reason)] == 0
    itl_bounds = [
        line.split('le="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("vllm:inter_token_latency_seconds_bucket")
    ]
    assert itl_bounds == [format_value(b) for b in ITL_BUCKETS_S] + ["+Inf"]
    assert itl_bounds[:3] == ["0.01", "0.025", "0.05"]
    assert metrics.render().startswith(b"# HELP vllm:num_requests_running ")
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


class FakeTransport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


class FakeConn:
    def __init__(self) -> None:
        self.transport = FakeTransport()
        self.on_lost: Any = None
        self.send_stamps = None  # the truth keeps the loop's stamps

    def write(self, data: bytes) -> None:
        pass

    def finish(self, keep_alive: bool) -> None:
        pass


class FakeTruth:
    enabled = False

    def record(self, record: dict[str, Any]) -> None:
        pass


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """``now[0]`` is what ``perf_counter_ns`` returns inside ``response``."""
    now = [1_000 * MS]

    class FakeTime:
        @staticmethod
        def perf_counter_ns() -> int:
            return now[0]

        @staticmethod
        def time() -> float:
            return time.time()

    monkeypatch.setattr(response_module, "time", FakeTime)
    yield now


def make_stream(metrics: SimMetrics, rid: str, arrival_ns: int, tokens: int) -> EngineStream:
    request = SimRequest(
        rid, "chat", "m", 12, tokens, 0, True, True, False, False, arrival_ns, tokens, "length"
    )
    setup = ResponseSetup(WallClock(), FakeTruth(), True, rid, lambda *a: None, metrics)
    stream = EngineStream(FakeConn(), request, setup, Seq(rid, arrival_ns, 12, tokens))
    stream.start()
    return stream


def test_values_from_the_send_stamps(fake_clock: list[int]) -> None:
    metrics = SimMetrics("m")
    in_flight: set[EngineStream] = set()
    metrics.bind(running=lambda: len(in_flight), in_flight=lambda: in_flight)
    arrival = fake_clock[0]
    done = make_stream(metrics, "done", arrival, 4)
    live = make_stream(metrics, "live", arrival, 10)
    in_flight.add(live)
    # done: TTFT 30 ms, gaps 2 ms, 10 ms (bound: le=0.01), 600 ms
    for at_ms in (30, 32, 42, 642):
        fake_clock[0] = arrival + at_ms * MS
        done.emit(0, fake_clock[0])
    # live: TTFT 50 ms, one gap of 20 ms, still streaming
    for at_ms in (50, 70):
        fake_clock[0] = arrival + at_ms * MS
        live.emit(0, fake_clock[0])
    values = samples(metrics.render().decode())

    def bucket(name: str, le: str) -> float:
        return values[key(f"{name}_bucket", le=le)]

    itl = "vllm:inter_token_latency_seconds"
    assert bucket(itl, "0.01") == 2  # 2 ms and exactly 10 ms
    assert bucket(itl, "0.025") == 3  # + live's 20 ms
    assert bucket(itl, "0.5") == 3
    assert bucket(itl, "0.75") == 4  # 600 ms
    assert bucket(itl, "+Inf") == 4
    assert values[key(f"{itl}_count")] == 4  # 3 gaps done + 1 in flight
    assert values[key(f"{itl}_sum")] == pytest.approx(0.632)
    ttft = "vllm:time_to_first_token_seconds"
    assert values[key(f"{ttft}_count")] == 2
    assert values[key(f"{ttft}_sum")] == pytest.approx(0.08)
    assert bucket(ttft, "0.04") == 1 and bucket(ttft, "0.06") == 2
    assert values[key("vllm:generation_tokens_total")] == 6  # 4 done + 2 in flight
    assert values[key("vllm:prompt_tokens_total")] == 24  # counted at first tokens
    assert values[key("vllm:request_success_total", finished_reason="length")] == 1
    e2e = "vllm:e2e_request_latency_seconds"
    assert values[key(f"{e2e}_count")] == 1
    assert values[key(f"{e2e}_sum")] == pytest.approx(0.642)
    assert values[key("vllm:num_requests_running")] == 1
    live.abort()
    in_flight.discard(live)
    values = samples(metrics.render().decode())
    assert values[key("vllm:request_success_total", finished_reason="abort")] == 1
    assert values[key(f"{e2e}_count")] == 1  # an aborted request has no e2e
    assert values[key(f"{itl}_count")] == 4  # its gap stays counted
    assert values[key("vllm:generation_tokens_total")] == 6


def test_engine_step_counts_prompts_that_got_their_first_token() -> None:
    core = EngineCore(
        engine_params(
            {
                "step_base_ms": 1.0,
                "max_num_batched_tokens": 4096,
                "chunked_prefill": True,
                "stall_prob": 0,
            }
        )
    )
    core.add(Seq("a", 0, 100, 3))
    core.add(Seq("b", 0, 50, 3))
    first = core.step(0)
    assert first is not None
    assert first.first_prompt_tokens == 150 and len(first.emitted) == 2
    second = core.step(first.end_ns)
    assert second is not None and second.first_prompt_tokens == 0


def test_text_parses_with_prometheus_client(fake_clock: list[int]) -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    metrics = SimMetrics('odd "name"\\')
    stream = make_stream(metrics, "r", fake_clock[0], 3)
    for _ in range(3):
        fake_clock[0] += 3 * MS
        stream.emit(0, fake_clock[0])
    metrics.iteration_tokens.observe(20)
    families = {f.name: f for f in parser.text_string_to_metric_families(metrics.render().decode())}
    assert families["vllm:generation_tokens"].type == "counter"
    assert families["vllm:generation_tokens"].samples[0].value == 3
    assert families["vllm:generation_tokens"].samples[0].labels["model_name"] == 'odd "name"\\'
    itl = families["vllm:inter_token_latency_seconds"]
    assert itl.type == "histogram"
    count = next(s for s in itl.samples if s.name.endswith("_count"))
    assert count.value == 2
    assert families["vllm:iteration_tokens_total"].type == "histogram"
    assert families["vllm:num_requests_waiting"].type == "gauge"


def test_engine_phases_of_a_request() -> None:
    metrics = SimMetrics("m")
    metrics.engine_request(queue_ns=200 * MS, prefill_ns=400 * MS, decode_ns=3_000 * MS)
    values = samples(metrics.render().decode())
    assert values[key("vllm:request_queue_time_seconds_sum")] == pytest.approx(0.2)
    assert values[key("vllm:request_queue_time_seconds_bucket", le="0.3")] == 1
    assert values[key("vllm:request_prefill_time_seconds_bucket", le="0.3")] == 0
    assert values[key("vllm:request_prefill_time_seconds_bucket", le="0.5")] == 1
    assert values[key("vllm:request_decode_time_seconds_sum")] == pytest.approx(3.0)
    assert values[key("vllm:request_inference_time_seconds_sum")] == pytest.approx(3.4)
    assert values[key("vllm:request_inference_time_seconds_count")] == 1


def test_planted_collections_are_served_as_prometheus_clients_gc_counter() -> None:
    """An engine whose every planted stall is a full collection counts them where vLLM's API
    server's prometheus_client does, and our reader of a server's /metrics finds them."""
    params = engine_params("h200-llama3-8b", {"stall_prob": 1.0, "stall_gc_share": 1.0})
    core = EngineCore(params, seed=1)
    metrics = SimMetrics()
    metrics.bind(running=lambda: len(core.running), gc_collections=lambda: core.gc_collections)
    core.add(Seq("a", 0, 16, 4))
    steps = [core.step(k * 100 * MS) for k in range(3)]
    assert all(step is not None and step.gc and step.stall_ns > 0 for step in steps)
    text = metrics.render().decode()
    found = samples(text)
    assert found[key("python_gc_collections_total", (), generation="2")] == 3
    assert found[key("python_gc_collections_total", (), generation="0")] == 0
    assert parse_snapshot(text, 0.0).gc_collections_total == 3


def test_a_throttle_episode_slows_every_step_in_it_and_the_dcgm_page_says_so() -> None:
    from tpot_locust.sim.dcgm import render_dcgm

    params = engine_params(
        "h200-llama3-8b",
        {"throttle_prob": 1.0, "throttle_ms": {"dist": "fixed", "value": 20}, "step_jitter": 0},
    )
    core = EngineCore(params, seed=1)
    core.add(Seq("a", 0, 16, 40))
    steps = [core.step(k * 6 * MS) for k in range(3)]
    assert all(step is not None for step in steps)
    added = [step.throttle_ns for step in steps if step is not None]
    assert added[0] > 0 and all(a > 0 for a in added)  # an episode of 20 ms, steps of ~8 ms
    first = steps[0]
    assert first is not None
    plain = first.end_ns - first.start_ns - first.throttle_ns
    assert abs(first.throttle_ns - plain * (params.throttle_factor - 1)) <= 1
    assert first.record()["throttle_ns"] == first.throttle_ns
    assert core.throttled
    page = samples(render_dcgm(True, 1.5, "h200-llama3-8b").decode())
    clock = [v for (name, _), v in page.items() if name == "DCGM_FI_DEV_SM_CLOCK"]
    reasons = [v for (name, _), v in page.items() if name == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]
    assert clock == [1320.0] and reasons == [4.0]
    calm = samples(render_dcgm(False, 1.5, "h200-llama3-8b").decode())
    assert [v for (name, _), v in calm.items() if name == "DCGM_FI_DEV_SM_CLOCK"] == [1980.0]
    snapshot = parse_snapshot(render_dcgm(True, 1.5, "x").decode(), 0.0)
    assert snapshot.gpu is not None and snapshot.gpu.clock_events == 4


def test_a_preempted_sequences_kv_is_offloaded_and_brought_back_not_recomputed() -> None:
    params = engine_params(
        "h200-llama3-8b",
        {
            "kv_cache_tokens": 4096,
            "max_model_len": 2048,
            "block_size": 16,
            "step_jitter": 0,
            "kv_offload_tokens": 100_000,
            "pcie_gb_per_s": 25.0,
        },
    )
    core = EngineCore(params, seed=1)
    metrics = SimMetrics()
    moved_bytes = (lambda: core.kv_loaded_bytes, lambda: core.kv_stored_bytes)
    metrics.bind(running=lambda: len(core.running), kv_offload=moved_bytes)
    for name in ("a", "b", "c"):  # three that each grow past a third of the cache
        core.add(Seq(name, 0, 1200, 600))
    steps = []
    for k in range(900):
        step = core.step(k * 10 * MS)
        if step is not None:
            steps.append(step)
    moved = [step for step in steps if step.offload_ns]
    assert core.preemptions > 0 and moved, "the cache never ran out"
    assert core.kv_stored_bytes > 0 and core.kv_loaded_bytes > 0
    # brought back, not recomputed: at most the one token whose KV was not yet written
    assert max(step.recompute_ns for step in steps) < MS
    per_token_ns = params.kv_bytes_per_token / params.pcie_gb_per_s
    first = moved[0]
    assert first.end_ns - first.start_ns >= first.offload_ns >= round(16 * per_token_ns)
    found = samples(metrics.render().decode())
    served = (("model_name", "tpot-sim"), ("engine", "0"))
    loaded = found[key("vllm:kv_offload_load_bytes_total", served)]
    assert loaded == core.kv_loaded_bytes
    assert found[key("vllm:kv_offload_store_bytes_total", served)] == core.kv_stored_bytes
    assert parse_snapshot(metrics.render().decode(), 0.0).kv_loaded_total == loaded
