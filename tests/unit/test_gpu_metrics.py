"""The GPU's own state from a DCGM exporter (issue 44, item 4): its published text read,
throttled intervals as ``gpu_throttle`` windows, ``server.gpu_metrics`` checked, one report
line a GPU endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_server_windows import scenario
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.causes import GPU_THROTTLE, KV_OFFLOAD
from tpot_locust.metrics.server_windows import GpuFigures, server_windows
from tpot_locust.report.server_view import format_gpu_state
from tpot_locust.report.tail_pictures import tail_timeline
from tpot_locust.scenario.yaml_source import ScenarioErrors
from tpot_locust.server_state.dcgm_page import slowing_reasons
from tpot_locust.server_state.scraper import Scraper
from tpot_locust.server_state.snapshots import DCGM, ServerMetricsError, parse_snapshot

DATA = Path(__file__).resolve().parents[1] / "data" / "server_metrics"


def test_the_exporters_published_example_is_read_and_its_blank_marker_is_no_reading() -> None:
    text = (DATA / "dcgm-exporter.txt").read_text()
    with pytest.raises(ServerMetricsError):  # its "..." elisions are not Prometheus text
        parse_snapshot(text, 0.0)
    shown = "\n".join(line for line in text.splitlines() if line != "...")
    snapshot = parse_snapshot(shown, 0.0)
    assert snapshot.engine == DCGM and snapshot.gpu is not None
    assert snapshot.gpu.gpus == 1 and snapshot.gpu.sm_clock_mhz == 139.0
    # MEMORY_TEMP's 9223372036854775794 is DCGM_INT64_NOT_SUPPORTED; the GPU's own is absent
    assert snapshot.gpu.temp_c is None and snapshot.gpu.clock_events is None


def test_two_gpus_in_the_exporters_format_one_held_to_its_power_cap() -> None:
    snapshot = parse_snapshot((DATA / "dcgm-exporter-h100.txt").read_bytes(), 0.0)
    gpu = snapshot.gpu
    assert gpu is not None and gpu.gpus == 2
    assert (gpu.sm_clock_mhz, gpu.power_w, gpu.temp_c) == (1410.0, 699.812, 71.0)
    assert gpu.clock_events == 0x4 and gpu.xid == 0
    assert slowing_reasons(gpu.clock_events) == ["software power cap"]
    assert slowing_reasons(0x1 | 0x2) == []  # idle, application clocks: not slowing a busy GPU


def lines(pages: list[str]) -> list[dict[str, Any]]:
    """The sampler's lines for these pages, one scrape each (as the child prints them)."""
    out: list[dict[str, Any]] = []
    scraper = Scraper("http://127.0.0.1:9400/metrics", 0.25, lambda line, _: out.append(line))
    for page in pages:
        scraper.fetch = lambda url, total, page=page: page.encode()
        scraper.sample()
    return [line for line in out if line["kind"] == "sample"]


def test_an_interval_with_a_slowing_reason_at_either_end_is_gpu_throttle() -> None:
    throttled = (DATA / "dcgm-exporter-h100.txt").read_text()
    calm = throttled.replace("} 4\n", "} 0\n").replace("} 1410\n", "} 1980\n")
    sampled = lines([calm, calm, throttled, calm])
    assert [line["engine"] for line in sampled] == [DCGM] * 4
    windows = [server_windows(a, b) for a, b in zip(sampled, sampled[1:], strict=False)]
    kinds = [[w.kind for w in found] for found in windows]
    assert kinds == [[], [GPU_THROTTLE], [GPU_THROTTLE]]
    assert windows[1][0].size == 1410.0  # the lowest SM clock at either end
    figures = GpuFigures()
    for line in sampled:
        figures.add(line)
    summary = figures.summary()
    assert summary is not None
    assert summary["sm_clock_mhz"] == [1410.0, 1980.0] and summary["slowed_samples"] == 1
    assert summary["slowing_reasons"] == ["software power cap"] and summary["xid_errors"] == []
    series = summary.pop("sm_clock_series")
    assert [clock for _, clock in series] == [1980.0, 1980.0, 1410.0, 1980.0]
    run = RunFacts(
        start_wall_s=series[0][0] - 1,
        gpu_metrics={"node7": {"gpu": summary | {"sm_clock_series": series}}},
    )
    assert "GPU node7: lowest SM clock" in "".join(tail_timeline({"run": run}))
    told = format_gpu_state({"run": RunFacts(gpu_metrics={"node7": {"gpu": summary}})})
    assert told == [
        "GPU node7: 2 GPUs; SM clock 1,410-1,980 MHz; power up to 700 W; up to 71 C; "
        "clocks held down in 1 of 4 samples (software power cap); no XID error"
    ]


def test_gpu_metrics_takes_a_url_or_labelled_urls() -> None:
    assert scenario({}).server.gpu_metrics == {}
    one = scenario({"gpu_metrics": "http://127.0.0.1:9400/metrics"}).server
    assert one.gpu_metrics == {"gpu": "http://127.0.0.1:9400/metrics"}
    two = {"node-1": "http://10.0.0.1:9400/metrics", "node-2": "http://10.0.0.2:9400/metrics"}
    assert scenario({"gpu_metrics": two}).server.gpu_metrics == two


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("ftp://h/metrics", "server.gpu_metrics"),
        ({"Node": "http://h/m"}, "server.gpu_metrics.Node"),
        ({"../x": "http://h/m"}, "server.gpu_metrics"),
        ({"a": True}, "server.gpu_metrics.a"),
        ({}, "server.gpu_metrics"),
        ([], "server.gpu_metrics"),
        ({f"n{i}": "http://h/m" for i in range(17)}, "server.gpu_metrics"),
    ],
)
def test_bad_gpu_metrics_are_refused_with_their_path(value: Any, where: str) -> None:
    with pytest.raises(ScenarioErrors) as raised:
        scenario({"gpu_metrics": value})
    text = str(raised.value)
    assert where in text and "must be a URL like http://127.0.0.1:9400/metrics" in text, text


def test_a_path_is_on_the_servers_own_host() -> None:
    server = scenario({"gpu_metrics": {"sim": "/dcgm/metrics"}}).server
    assert server.gpu_metrics_urls("http://127.0.0.1:8000/v1") == {
        "sim": "http://127.0.0.1:8000/dcgm/metrics"
    }
    assert server.gpu_metrics_urls(None) == {}


def test_kv_loaded_back_from_cpu_memory_is_a_kv_offload_window() -> None:
    """vLLM's OffloadingConnector counts bytes loaded back (``kv_offload_load_bytes``);
    a rise between two samples is a ``kv_offload`` window, a fall a restart (none)."""
    before = {"t_wall_s": 1.0, "i": 1, "engine": "vllm", "kv_loaded_total": 1e6}
    after = {"t_wall_s": 1.25, "i": 2, "engine": "vllm", "kv_loaded_total": 3e6}
    (window,) = server_windows(before, after)
    assert window.kind == KV_OFFLOAD and window.size == 2e6
    assert server_windows(after, before | {"t_wall_s": 1.5}) == []
    text = (
        "# TYPE vllm:kv_offload_load_bytes counter\n"
        'vllm:kv_offload_load_bytes_total{model_name="m",engine="0"} 4096\n'
    )
    assert parse_snapshot(text, 0.0).kv_loaded_total == 4096
    sglang = 'sglang:load_back_tokens_total{pool="kv"} 512\nsglang:num_running_reqs 1\n'
    assert parse_snapshot(sglang, 0.0).kv_loaded_total == 512


def test_kv_stored_to_cpu_memory_is_a_kv_offload_window_too() -> None:
    """A preempted sequence's KV swapped out (``kv_offload_store_bytes``) holds the step as
    a swap-in does: the simulator's truth counts both ways, and a CI run where only loads
    were read named 0.70 of its true ``kv_offload`` gaps above P99 (the swap-out steps
    missed)."""
    before = {"t_wall_s": 1.0, "i": 1, "engine": "vllm", "kv_loaded_total": 1e6}
    stored = before | {"t_wall_s": 1.25, "i": 2, "kv_stored_total": 5e5}
    assert server_windows(before, stored) == []  # the store counter appeared: no rise yet
    after = stored | {"t_wall_s": 1.5, "i": 3, "kv_stored_total": 8e5}
    (window,) = server_windows(stored, after)
    assert window.kind == KV_OFFLOAD and window.size == 3e5
    both = after | {"t_wall_s": 1.75, "i": 4, "kv_loaded_total": 2e6, "kv_stored_total": 9e5}
    (window,) = server_windows(after, both)
    assert window.size == 1e6 + 1e5
    text = (
        "# TYPE vllm:kv_offload_store_bytes counter\n"
        'vllm:kv_offload_store_bytes_total{model_name="m",engine="0"} 8192\n'
    )
    snapshot = parse_snapshot(text, 0.0)
    assert snapshot.kv_stored_total == 8192 and snapshot.kv_loaded_total is None


def test_an_edited_gpu_summary_is_shown_not_raised() -> None:
    from tpot_locust.report.tail_pictures import why_the_tail

    hostile = {
        "gpu": {
            "gpus": "8",
            "sm_clock_mhz": ["x", None],
            "power_w_max": float("nan"),
            "slowing_reasons": ["<script>", 3],
            "xid_errors": [79, "y"],
            "samples": -5,
            "slowed_samples": True,
        }
    }
    summary: dict[str, Any] = {"run": RunFacts(gpu_metrics={"a<b": hostile, "c": "?"})}
    lines = format_gpu_state(summary)
    assert lines[0].startswith("GPU a<b: ? GPUs; clocks held down in 0 of 0 samples")
    assert "XID errors 79, 0" in lines[0] and lines[1] == "GPU c: no GPU sample (0 failed)"
    page = "".join(why_the_tail(summary))
    assert "GPU a&lt;b" in page and "&lt;script&gt;" in page and "<script>" not in page


def test_the_clock_series_stays_bounded_and_keeps_the_lowest_clock() -> None:
    figures = GpuFigures()
    for second in range(5000):
        clock = 1000.0 if second == 2501 else 1980.0
        figures.add({"t_wall_s": float(second), "gpu": {"sm_clock_mhz": clock}})
    summary = figures.summary()
    assert summary is not None
    series = summary["sm_clock_series"]
    assert len(series) <= 2000 and min(clock for _, clock in series) == 1000.0
