"""The simulator's engine mode: profiles and scheduling in virtual time, where gaps are exact."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.sim.engine import EngineCore, Seq
from tpot_locust.sim.profiles import (
    EngineParams,
    ProfileError,
    engine_params,
    parse_assignment,
    profile_names,
    profile_text,
)
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
    running_then = [
        r
        for r in run.records
        if r["scheduled_ns"] < first["start_ns"] and r["send_ns"][-1] > first["start_ns"]
    ]
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
    p = params(
        chunked_prefill=chunked,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        kv_cache_tokens=kv_blocks * 16,
        max_model_len=kv_blocks * 16,
        block_size=16,
    )
    workload = [
        VirtualRequest(f"r{i}", float(t), prompt, out)
        for i, (t, prompt, out) in enumerate(requests)
    ]
    run = run_virtual(p, workload)
    assert sorted(r["request_id"] for r in run.records) == sorted(w.request_id for w in workload)
    for w in workload:
        record = run.by_id[w.request_id]
        assert record["completion_tokens"] == w.output_tokens == len(record["send_ns"])
        assert record["send_ns"] == sorted(record["send_ns"])
        assert record["send_ns"][0] >= record["prefill_end_ns"] > record["prefill_start_ns"]
        assert record["prefill_start_ns"] >= record["scheduled_ns"] >= record["arrival_ns"]
        assert len(record["preemptions"]) == sum(
            s["preempted"].count(w.request_id) for s in run.steps
        )
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
