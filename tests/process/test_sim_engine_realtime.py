"""The engine simulator in real time: a real process, real sockets, its step log and CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tpot_locust.sim.process import cpu_seconds, machine_busy_seconds, start_simulator
from tpot_locust.sim.truth import read_truth

MS = 1_000_000


def chat_request(request_id: str, prompt_words: int, max_tokens: int, stream: bool = True) -> bytes:
    body = json.dumps(
        {
            "model": "tpot-sim",
            "stream": stream,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "word " * prompt_words}],
        }
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
        f"X-Request-Id: {request_id}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def run_streams(host: str, port: int, requests: list[bytes], timeout_s: float) -> list[bytes]:
    """Send all requests at once on their own connections; read each until the server closes.

    One reader thread per connection: other test modules import Locust, whose gevent
    monkey-patching removes ``select.epoll`` from this process.
    """
    socks = []
    for raw in requests:
        sock = socket.create_connection((host, port), timeout=5)
        sock.sendall(raw)
        sock.settimeout(timeout_s)
        socks.append(sock)
    data: list[list[bytes]] = [[] for _ in socks]
    closed = [False] * len(socks)

    def read(index: int) -> None:
        try:
            while chunk := socks[index].recv(1 << 16):
                data[index].append(chunk)
            closed[index] = True
        except OSError:
            pass

    threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(len(socks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    for sock in socks:
        sock.close()
    still_open = closed.count(False)
    assert not still_open, f"{still_open} streams still open after {timeout_s} s"
    return [b"".join(chunks) for chunks in data]


def split_truth(path: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    lines = read_truth(path)
    requests = {r["request_id"]: r for r in lines if "request_id" in r}
    steps = [r for r in lines if r.get("type") == "step"]
    header = [r for r in lines if r.get("type") == "engine"]
    assert len(header) == 1 and header[0]["profile"]["name"] == "h200-llama3-8b"
    assert len(requests) + len(steps) + 1 == len(lines)
    return requests, steps


def lateness_ms(steps: list[dict[str, Any]]) -> list[float]:
    return sorted((s["sent_ns"] - s["end_ns"]) / MS for s in steps if s["emitted"])


LATE_P99_MS = 0.5
BUSY_MACHINE = 0.5  # CPUs kept busy by other processes: above this, the tail is theirs


@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux /proc for CPU use")
def test_realtime_64_streams_step_times_on_schedule(tmp_path: Path) -> None:
    """Step send times within 0.5 ms of the schedule at p99, at 64 streams.

    On a shared 2-vCPU VM other processes can take the CPU for milliseconds, so up to 5 runs
    are made (each ~2 s, ~300 steps); the p99 bound must hold in one of them. If none meets it
    while other processes kept more than half a CPU busy during every run, the machine is
    reported as too busy to measure (skip) instead of failing. Every run must keep the median
    within 0.1 ms and must never send a token before its step's scheduled end.
    """
    attempts = []
    for attempt in range(5):
        truth = tmp_path / f"truth{attempt}.jsonl"
        args = ["--profile", "h200-llama3-8b", "--set", "stall_prob=0", "--seed", "5"]
        with start_simulator(*args, truth=truth) as sim:
            requests = [chat_request(f"a{attempt}-{i}", 64, 300) for i in range(64)]
            pid = sim.process.pid
            sim0, own0, busy0 = cpu_seconds(pid), cpu_seconds(os.getpid()), machine_busy_seconds()
            wall0 = time.time()
            bodies = run_streams(sim.host, sim.port, requests, timeout_s=30)
            wall = time.time() - wall0
            sim_cpu = cpu_seconds(pid) - sim0
            ours = sim_cpu + cpu_seconds(os.getpid()) - own0  # the simulator and this client
            others = machine_busy_seconds() - busy0 - ours
            time.sleep(0.25)  # the truth file is flushed every 100 ms
        records, steps = split_truth(truth)
        assert len(records) == 64 and all(b.endswith(b"0\r\n\r\n") for b in bodies)
        for record in records.values():
            assert record["completion_tokens"] == 300 and not record["aborted"]
            assert len(record["steps"]) == 300 and record["prefill_end_ns"] is not None
        assert sum(s["emitted"] for s in steps) == 64 * 300
        # Every token of a step goes out after the step's scheduled end, never before.
        end_of = {s["step"]: s["end_ns"] for s in steps}
        for record in records.values():
            assert all(
                t >= end_of[k] for t, k in zip(record["send_ns"], record["steps"], strict=True)
            )
        late = lateness_ms(steps)
        p50, p99 = late[len(late) // 2], late[int(0.99 * len(late))]
        attempts.append(
            {
                "p50": round(p50, 3),
                "p99": round(p99, 3),
                "max": round(late[-1], 3),
                "steps": len(late),
                "others_cpu": round(max(0.0, others) / wall, 2),
                "sim_cpu": round(sim_cpu / wall, 2),
            }
        )
        assert p50 < 0.1, attempts
        if p99 <= LATE_P99_MS:
            break
    print("step lateness (ms) per run:", attempts)
    if min(a["p99"] for a in attempts) > LATE_P99_MS:
        if min(a["others_cpu"] for a in attempts) > BUSY_MACHINE:
            pytest.skip(f"machine too busy with other processes to time steps: {attempts}")
        pytest.fail(f"step lateness p99 above {LATE_P99_MS} ms in every run: {attempts}")


@pytest.mark.timeout(60)
def test_realtime_kv_pressure_and_abort(tmp_path: Path) -> None:
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
        too_long = run_streams(sim.host, sim.port, [chat_request("big", 1000, 100)], 10)[0]
        assert too_long.startswith(b"HTTP/1.1 400") and b"maximum context length" in too_long
        gone = socket.create_connection((sim.host, sim.port), timeout=5)
        gone.sendall(chat_request("gone", 10, 900))
        gone.recv(4096)
        requests = [chat_request(f"kv{i}", 100, 200, stream=i % 2 == 0) for i in range(8)]
        gone.close()
        bodies = run_streams(sim.host, sim.port, requests, timeout_s=30)
        time.sleep(0.25)
    assert all(b.startswith(b"HTTP/1.1 200") for b in bodies)
    records = {r["request_id"]: r for r in read_truth(truth)}
    lines = read_truth(steps_file)
    assert all("request_id" not in s for s in lines)
    assert lines[0]["type"] == "engine" and lines[0]["profile"]["kv_cache_tokens"] == 1024
    steps = lines[1:]
    assert all(s["type"] == "step" for s in steps)
    assert records["gone"]["aborted"] is True
    preempted = [rid for s in steps for rid in s["preempted"]]
    assert preempted, "8 x 300 tokens do not fit 1024 KV tokens: something must be preempted"
    for i in range(8):
        record = records[f"kv{i}"]
        assert record["completion_tokens"] == 200 and not record["aborted"]
        assert len(record["preemptions"]) == preempted.count(f"kv{i}")
        assert record["tokens"] == ([1] * 200 if i % 2 == 0 else [200])
    assert max(s["kv_tokens"] for s in steps) <= 1024


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpot_locust.sim", *args], capture_output=True, text=True, timeout=30
    )


def test_cli_profile_flags() -> None:
    listed = run_cli("--list-profiles")
    assert listed.returncode == 0 and "h200-llama3-8b:" in listed.stdout
    shown = run_cli("--show-profile", "cpu-slow")
    assert shown.returncode == 0 and yaml.safe_load(shown.stdout)["max_num_seqs"] == 128
    for bad, message in (
        (["--profile", "nope"], "unknown profile"),
        (["--profile", "cpu-slow", "--gap-ms", "2"], "--gap-ms cannot be used with --profile"),
        (["--set", "max_num_seqs=4"], "need --profile"),
        (["--profile", "cpu-slow", "--set", "max_num_seqs=x"], "max_num_seqs"),
        (["--profile", "cpu-slow", "--max-num-batched-tokens", "8"], "max_num_batched_tokens"),
    ):
        result = run_cli(*bad)
        assert result.returncode == 2, (bad, result.stderr)
        assert message in result.stderr, (bad, result.stderr)
