"""The simulator's engine mode: scheduling in virtual time (exact), then the real-time server."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.sim.engine import EngineCore, Seq
from tpot_locust.sim.process import start_simulator
from tpot_locust.sim.profiles import (
    EngineParams,
    ProfileError,
    engine_params,
    parse_assignment,
    profile_names,
    profile_text,
)
from tpot_locust.sim.truth import read_truth
from tpot_locust.sim.virtual import VirtualRequest, run_virtual

MS = 1_000_000

# Round numbers so every step time below is exact: 5 ms + 0.05 ms per decoding sequence +
# 0.04 ms per prefill token.
BASE: dict[str, Any] = dict(
    step_base_ms=5.0,
    decode_ms_per_seq=0.05,
    prefill_ms_per_token=0.04,
    max_num_seqs=64,
    max_num_batched_tokens=2048,
    kv_cache_tokens=200_000,
    max_model_len=16384,
)


def params(**overrides: Any) -> EngineParams:
    return engine_params({**BASE, **overrides})


def step_ms(step: dict[str, Any]) -> float:
    return (step["end_ns"] - step["start_ns"]) / MS


def cost_ms(decode: int, prefill: int) -> float:
    return 5.0 + 0.05 * decode + 0.04 * prefill


def steady_gaps(run: Any, request_id: str, after_ms: float = 200) -> list[float]:
    """Gaps ending after ``after_ms`` (the start-up ramp, when the prompts prefill, is left out)."""
    send = run.by_id[request_id]["send_ns"]
    return [(b - a) / MS for a, b in zip(send, send[1:], strict=False) if b >= after_ms * MS]


# -- profiles ------------------------------------------------------------------------------------


def test_shipped_profiles_load_and_are_documented() -> None:
    assert {"h200-llama3-8b", "cpu-slow"} <= set(profile_names())
    for name in profile_names():
        p = engine_params(name)
        assert p.name == name and p.description and p.source
        assert yaml.safe_load(profile_text(name))["max_num_seqs"] == p.max_num_seqs
    h200 = engine_params("h200-llama3-8b")
    assert (h200.max_num_seqs, h200.max_num_batched_tokens, h200.chunked_prefill) == (
        1024,
        8192,
        True,
    )
    assert engine_params("cpu-slow").step_base_ms > h200.step_base_ms


def test_profile_file_extends_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("extends: h200-llama3-8b\nmax_num_seqs: 64\nchunked_prefill: false\n")
    p = engine_params(str(path), dict([parse_assignment("stall_ms={dist: fixed, value: 7}")]))
    assert (p.name, p.max_num_seqs, p.chunked_prefill) == ("mine", 64, False)
    assert p.step_base_ms == engine_params("h200-llama3-8b").step_base_ms
    assert p.stall_distribution().mean == 7
    assert parse_assignment("kv_cache_tokens=4096") == ("kv_cache_tokens", 4096)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"step_base_ms": "fast"}, "step_base_ms"),
        ({"chunked_prefill": "yes"}, "chunked_prefill"),
        ({"max_num_batched_tokens": 16}, "max_num_batched_tokens"),
        ({"kv_cache_tokens": 1000}, "kv_cache_tokens"),
        ({"stall_prob": 0.1, "stall_ms": 0}, "stall_ms"),
        ({"stall_prob": 2, "stall_ms": 5}, "stall_prob"),
        ({"stall_prob": 0.1, "stall_ms": {"dist": "nope"}}, "stall_ms"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_profile_errors_name_the_key(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        engine_params("h200-llama3-8b", overrides)


def test_unknown_profile_and_bad_assignment() -> None:
    with pytest.raises(ProfileError, match="unknown profile 'nope'.*h200-llama3-8b"):
        engine_params("nope")
    with pytest.raises(ProfileError, match="KEY=VALUE"):
        parse_assignment("max_num_seqs")
    with pytest.raises(ProfileError, match="unknown profile key"):
        parse_assignment("max_seqs=3")


# -- scheduling, virtual time --------------------------------------------------------------------


def interference_run(chunked: bool):
    """32 streams decoding, then an 8k-token prompt arrives at 500 ms."""
    requests = [VirtualRequest(f"d{i}", 0.0, 100, 400) for i in range(32)]
    requests.append(VirtualRequest("long", 500.0, 8192, 20))
    return run_virtual(params(chunked_prefill=chunked), requests)


def test_prefill_unchunked_stalls_every_decoding_stream_once() -> None:
    run = interference_run(chunked=False)
    long_steps = [s for s in run.steps if s["start_ns"] >= 200 * MS and step_ms(s) > 20]
    assert len(long_steps) == 1  # exactly the step that runs the whole prefill is long
    stall = long_steps[0]
    assert (stall["prefill_tokens"], stall["decode"], stall["prefill_seqs"]) == (8192, 32, 1)
    assert step_ms(stall) == pytest.approx(cost_ms(32, 8192), abs=1e-6)  # 334.28 ms
    for s in run.steps:  # every other step of the steady state costs its decodes only
        if s["start_ns"] >= 200 * MS and s is not stall:
            assert step_ms(s) == pytest.approx(cost_ms(s["decode"], s["prefill_tokens"]), abs=1e-6)
            assert step_ms(s) < 7
    for i in range(32):
        assert len(run.gaps_ms(f"d{i}")) == 399
        long_gaps = [g for g in steady_gaps(run, f"d{i}") if g > 20]
        assert long_gaps == [pytest.approx(step_ms(stall), abs=1e-6)]  # one gap ~ the prefill
    record = run.by_id["long"]
    assert record["prefill_start_ns"] == stall["start_ns"]
    assert record["prefill_end_ns"] == stall["end_ns"] == record["send_ns"][0]
    assert record["queue_ns"] == stall["start_ns"] - 500 * MS
    assert run.ttft_ms("long") == pytest.approx(record["queue_ns"] / MS + step_ms(stall))
    assert record["steps"][0] == stall["step"]


def test_prefill_chunked_bounds_every_gap_and_delays_ttft() -> None:
    off, on = interference_run(chunked=False), interference_run(chunked=True)
    chunk_step_ms = cost_ms(32, 2048)  # the step time of a full token budget: 87.32 ms
    chunk_steps = [s for s in on.steps if s["start_ns"] >= 500 * MS and s["prefill_tokens"]]
    # 8192 tokens in chunks of what the budget leaves after 32 decodes: 4 x 2016 + 128.
    assert [s["prefill_tokens"] for s in chunk_steps] == [2016, 2016, 2016, 2016, 128]
    assert all(s["decode"] == 32 for s in chunk_steps)
    long_steps = [s for s in on.steps if s["start_ns"] >= 200 * MS and step_ms(s) > 20]
    assert long_steps == chunk_steps[:4]
    for i in range(32):
        gaps = steady_gaps(on, f"d{i}")
        assert max(on.gaps_ms(f"d{i}")) <= chunk_step_ms  # the start-up ramp too
        assert sorted(gaps)[-5:-4] < [20]
        assert sorted(gaps)[-4:] == [pytest.approx(cost_ms(32, 2016), abs=1e-6)] * 4
        assert max(steady_gaps(off, f"d{i}")) > 3 * max(gaps)
    record = on.by_id["long"]
    assert record["prefill_start_ns"] == chunk_steps[0]["start_ns"]
    assert record["prefill_end_ns"] == chunk_steps[-1]["end_ns"] == record["send_ns"][0]
    expected_ttft = record["queue_ns"] / MS + sum(step_ms(s) for s in chunk_steps)
    assert on.ttft_ms("long") == pytest.approx(expected_ttft, abs=1e-6)
    assert on.ttft_ms("long") > off.ttft_ms("long")  # TTFT grows instead of the stall


def test_kv_cache_pressure_preempts_newest_and_everything_completes() -> None:
    p = params(kv_cache_tokens=2048, max_model_len=2048, max_num_seqs=16)
    requests = [VirtualRequest(f"r{i}", i * 0.1, 200, 300) for i in range(16)]
    run = run_virtual(p, requests)
    assert run.preemptions > 0
    logged = [rid for s in run.steps for rid in s["preempted"]]
    assert len(logged) == run.preemptions
    assert all(s["kv_tokens"] <= 2048 for s in run.steps)
    assert len(run.records) == 16
    preempted_records = 0
    for record in run.records:
        assert record["completion_tokens"] == 300 and record["aborted"] is False
        assert len(record["send_ns"]) == 300 and record["send_ns"] == sorted(record["send_ns"])
        assert sum(1 for _ in record["preemptions"]) == logged.count(record["request_id"])
        for event in record["preemptions"]:
            preempted_records += 1
            # Recompute: the prefill of prompt + produced tokens ends with the next token.
            assert event["at_ns"] <= event["prefill_start_ns"] < event["prefill_end_ns"]
            assert event["prefill_end_ns"] in record["send_ns"]
            assert record["send_ns"][event["generated"]] == event["prefill_end_ns"]
    assert preempted_records == run.preemptions
    # The first preemption takes the newest running request (the last one admitted).
    first = next(s for s in run.steps if s["preempted"])
    victim = run.by_id[first["preempted"][0]]
    running_then = [r for r in run.records if r["scheduled_ns"] < first["start_ns"]
                    and r["send_ns"][-1] > first["start_ns"]]  # fmt: skip
    assert victim["scheduled_ns"] == max(r["scheduled_ns"] for r in running_then)
    recompute = [s for s in run.steps if s["prefill_tokens"] > 200]
    assert recompute, "a preempted request re-prefills its prompt and its produced tokens"


def test_fcfs_within_max_num_seqs_and_token_budget() -> None:
    p = params(max_num_seqs=4, max_num_batched_tokens=300, chunked_prefill=False)
    requests = [VirtualRequest(f"r{i}", 0.0, 100, 10 + i) for i in range(8)]
    run = run_virtual(p, requests)
    first = run.steps[0]
    assert (first["prefill_seqs"], first["prefill_tokens"]) == (3, 300)  # budget: 3 prompts
    scheduled = [run.by_id[f"r{i}"]["scheduled_ns"] for i in range(8)]
    assert scheduled == sorted(scheduled)  # first come, first served
    assert all(s["running"] <= 4 for s in run.steps)
    # r4 enters in the step right after r0 (the shortest) finished and freed a slot.
    r0_done = run.by_id["r0"]["send_ns"][-1]
    assert scheduled[4] == r0_done
    assert sorted(r["completion_tokens"] for r in run.records) == list(range(10, 18))


def test_a_step_emits_all_its_tokens_at_one_instant() -> None:
    requests = [VirtualRequest(f"r{i}", i * 3.0, 50 + 10 * i, 40) for i in range(12)]
    run = run_virtual(params(), requests)
    end_of = {s["step"]: s["end_ns"] for s in run.steps}
    emitted: dict[int, int] = {}
    for record in run.records:
        for index, sent in zip(record["steps"], record["send_ns"], strict=True):
            assert sent == end_of[index]
            emitted[index] = emitted.get(index, 0) + 1
    assert emitted == {s["step"]: s["emitted"] for s in run.steps}
    starts = [s["start_ns"] for s in run.steps]
    ends = [s["end_ns"] for s in run.steps]
    assert all(b >= a for a, b in zip(ends, starts[1:], strict=False))  # one step at a time


def test_stalls_are_seeded_and_rare() -> None:
    p = params(stall_prob=0.05, stall_ms={"dist": "fixed", "value": 30})
    requests = [VirtualRequest(f"r{i}", 0.0, 10, 400) for i in range(4)]
    a, b, c = (run_virtual(p, requests, seed=s) for s in (1, 1, 2))
    assert a.steps == b.steps and a.records == b.records  # deterministic
    stalls = [s for s in a.steps if s["stall_ns"]]
    assert 5 <= len(stalls) <= 40 and all(s["stall_ns"] == 30 * MS for s in stalls)
    for s in stalls:
        assert step_ms(s) == pytest.approx(cost_ms(s["decode"], s["prefill_tokens"]) + 30)
    assert [s["step"] for s in stalls] != [s["step"] for s in c.steps if s["stall_ns"]]


def test_seed_report_shape_from_prefill_bursts() -> None:
    """Decoding streams plus rare long unchunked prompts: a right-skewed TPOT like the seed's."""
    p = dataclasses.replace(engine_params("h200-llama3-8b"), chunked_prefill=False)
    requests = [VirtualRequest(f"d{i}", i * 2.0, 200, 1500) for i in range(64)]
    requests += [VirtualRequest(f"long{i}", 2000.0 + 3000.0 * i, 16000, 10) for i in range(2)]
    run = run_virtual(p, requests, seed=3)
    tpot = sorted(g for i in range(64) for g in run.gaps_ms(f"d{i}"))
    median, mean = statistics.median(tpot), statistics.fmean(tpot)
    p9999 = tpot[int(0.9999 * len(tpot))]
    assert len(tpot) > 90_000
    assert mean > median
    assert p9999 / median > 20


@settings(max_examples=60, deadline=None)
@given(
    chunked=st.booleans(),
    max_num_seqs=st.integers(1, 8),
    budget=st.integers(8, 300),
    kv_blocks=st.integers(20, 60),
    requests=st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 150), st.integers(1, 60)),
        min_size=1,
        max_size=12,
    ),
)
def test_scheduler_invariants(
    chunked: bool,
    max_num_seqs: int,
    budget: int,
    kv_blocks: int,
    requests: list[tuple[int, int, int]],
) -> None:
    """Any workload: every request completes in full, and no step breaks a limit."""
    budget = max(budget, max_num_seqs)
    p = params(chunked_prefill=chunked, max_num_seqs=max_num_seqs,
               max_num_batched_tokens=budget, kv_cache_tokens=kv_blocks * 16,
               max_model_len=kv_blocks * 16, block_size=16)  # fmt: skip
    workload = [VirtualRequest(f"r{i}", float(t), prompt, out)
                for i, (t, prompt, out) in enumerate(requests)]  # fmt: skip
    run = run_virtual(p, workload)
    assert sorted(r["request_id"] for r in run.records) == sorted(w.request_id for w in workload)
    for w in workload:
        record = run.by_id[w.request_id]
        assert record["completion_tokens"] == w.output_tokens == len(record["send_ns"])
        assert record["send_ns"] == sorted(record["send_ns"])
        assert record["send_ns"][0] >= record["prefill_end_ns"] > record["prefill_start_ns"]
        assert record["prefill_start_ns"] >= record["scheduled_ns"] >= record["arrival_ns"]
        assert len(record["preemptions"]) == sum(s["preempted"].count(w.request_id)
                                                 for s in run.steps)  # fmt: skip
    for s in run.steps:
        assert s["running"] <= max_num_seqs and s["kv_tokens"] <= kv_blocks * 16
        assert step_ms(s) == pytest.approx(cost_ms(s["decode"], s["prefill_tokens"]), abs=1e-5)
        if chunked:
            assert s["decode"] + s["prefill_tokens"] <= budget
        else:
            assert s["prefill_tokens"] <= budget or s["prefill_seqs"] == 1
    assert sum(s["emitted"] for s in run.steps) == sum(w.output_tokens for w in workload)
    assert run.preemptions == sum(len(s["preempted"]) for s in run.steps)


def test_engine_core_abort_frees_kv() -> None:
    core = EngineCore(params(kv_cache_tokens=20_000))
    a, b = Seq("a", 0, 1000, 50), Seq("b", 0, 1000, 50)
    core.add(a)
    core.add(b)
    core.step(0)
    used = core.total_blocks - core.free_blocks
    assert used == 2 * 63  # 1000 tokens in blocks of 16
    core.abort(a)
    assert core.total_blocks - core.free_blocks == used // 2
    assert core.running == [b]


# -- real time -----------------------------------------------------------------------------------


def chat_request(request_id: str, prompt_words: int, max_tokens: int, stream: bool = True) -> bytes:
    body = json.dumps(
        {
            "model": "tpot-sim",
            "stream": stream,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "word " * prompt_words}],
        }  # fmt: skip
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


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent neither idle nor in iowait since boot (Linux /proc)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


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
            assert all(t >= end_of[k] for t, k in zip(record["send_ns"], record["steps"],
                                                       strict=True))  # fmt: skip
        late = lateness_ms(steps)
        p50, p99 = late[len(late) // 2], late[int(0.99 * len(late))]
        attempts.append({"p50": round(p50, 3), "p99": round(p99, 3), "max": round(late[-1], 3),
                         "steps": len(late), "others_cpu": round(max(0.0, others) / wall, 2),
                         "sim_cpu": round(sim_cpu / wall, 2)})  # fmt: skip
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
    args = ["--profile", "cpu-slow", "--set", "step_base_ms=1", "--set", "decode_ms_per_seq=0",
            "--set", "prefill_ms_per_token=0.001", "--set", "frontend_ms=0",
            "--set", "stall_prob=0", "--kv-cache-tokens", "1024", "--max-model-len", "1024",
            "--steps", str(steps_file)]  # fmt: skip
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
        [sys.executable, "-m", "tpot_locust.sim", *args],
        capture_output=True,
        text=True,
        timeout=30,
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
