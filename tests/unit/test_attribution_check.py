"""Our attribution of the tail against the engine simulator's true causes per gap."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.attribution_check import (
    attribution_check,
    format_attribution_check,
    true_gaps,
)
from tpot_locust.report.finishing import finish_run
from tpot_locust.sim.profiles import engine_params
from tpot_locust.sim.virtual import VirtualRequest, VirtualRun, run_virtual

MS = 1_000_000


def step(
    index: int,
    prefill: int = 0,
    preempted: tuple[str, ...] = (),
    stall_ns: int = 0,
    prefill_ns: int | None = None,
    gc: bool = False,
    throttle_ns: int = 0,
) -> dict[str, Any]:
    timed = {} if prefill_ns is None else {"prefill_ns": prefill_ns}
    return (
        timed
        | {"gc": gc, "throttle_ns": throttle_ns}
        | {
            "type": "step",
            "step": index,
            "start_ns": index * MS,
            "end_ns": (index + 1) * MS,
            "decode": 1,
            "prefill_tokens": prefill,
            "preempted": list(preempted),
            "stall_ns": stall_ns,
        }
    )


def request(rid: str, send_ns: list[int], steps: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "request_id": rid,
        "arrival_ns": extra.pop("arrival_ns", 0),
        "send_ns": send_ns,
        "tokens": [1] * len(send_ns),
        "aborted": False,
        "steps": steps,
        "preemptions": extra.pop("preemptions", []),
        **extra,
    }


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def causes_of(gaps: Any, rid: str) -> list[tuple[bool, bool, int]]:
    mine = gaps.request_id == rid
    return list(
        zip(
            gaps.prefill[mine].tolist(),
            gaps.preemption[mine].tolist(),
            gaps.prefill_tokens[mine].tolist(),
            strict=True,
        )
    )


def test_true_causes_come_from_the_steps_inside_each_gap(tmp_path: Path) -> None:
    steps = [
        step(0, prefill=300),
        step(1),
        step(2, prefill=500),
        step(3),
        step(4, preempted=("x",)),
        step(5),
        step(6, prefill=100),
        step(7, prefill=50),
    ]
    truth = write(
        tmp_path / "truth.jsonl",
        [
            {"type": "engine", "profile": {}},
            *steps,
            # events at steps 0 1 2 3 5 7: gaps (0,1] (1,2] (2,3] (3,5] (5,7]
            request("a", [1, 2, 3, 4, 6, 8], [0, 1, 2, 3, 5, 7]),
            # b itself preempted after its 2nd token, in a step that produced nothing (so no step
            # line names it); its line says so
            request("b", [1, 2, 4], [0, 1, 3], preemptions=[{"at_ns": 3, "generated": 2}]),
            request("one", [5], [4]),  # one token event: no gap
        ],
    )
    gaps = true_gaps(truth, NO_FACTS)
    assert gaps is not None and gaps.requests == 3 and gaps.step_lines == 8
    assert causes_of(gaps, "a") == [
        (False, False, 0),  # (0, 1]: plain decode; step 0's prefill ran before token 0
        (True, False, 500),  # (1, 2]: a prefill step produced token 2
        (False, False, 0),
        (False, True, 0),  # (3, 5]: step 4 preempted x
        (True, False, 150),  # (5, 7]: two prefill steps, summed
    ]
    assert causes_of(gaps, "b") == [(False, False, 0), (True, True, 500)]
    assert gaps.itl_ns[gaps.request_id == "a"].tolist() == [1, 1, 1, 2, 2]
    assert gaps.unstepped == 0


def test_gaps_over_missing_step_lines_are_counted_and_steps_may_be_apart(tmp_path: Path) -> None:
    truth = write(tmp_path / "truth.jsonl", [request("a", [1, 2, 3], [0, 1, 3])])
    steps = write(tmp_path / "steps.jsonl", [step(0), step(1), step(3, prefill=9)])
    assert true_gaps(truth, NO_FACTS) is None  # no step lines in the truth itself
    gaps = true_gaps(truth, NO_FACTS, steps_path=steps)
    assert gaps is not None and gaps.unstepped == 1  # step 2 has no line
    assert causes_of(gaps, "a") == [(False, False, 0), (True, False, 9)]


def tail_truth(tmp_path: Path, tail: dict[int, dict[str, Any]], **run: Any) -> Path:
    """100 requests x 102 events (10,100 gaps of 1 ms, one step each, every request on its
    own steps); the gaps of request ``t`` for t in ``tail`` last 50 ms instead, and its last
    gap's step gets ``tail[t]`` (prefill, preempted, stall_ns). The true P99.9 is the
    10,090th gap: 1 ms with 10 long ones, so exactly those lie above it."""
    lines: list[dict[str, Any]] = []
    for r in range(100):
        base = r * 102
        gaps = [1 * MS] * 101
        if r in tail:
            gaps[-1] = 50 * MS
        sends = (10 * MS + np.cumsum([0, *gaps])).tolist()
        lines.append(request(f"r{r}", sends, list(range(base, base + 102)), arrival_ns=0))
        for k in range(102):
            lines.append(step(base + k, **(tail.get(r, {}) if k == 101 else {})))
    return write(tmp_path / "truth.jsonl", lines)


def ours(entries: dict[tuple[str, int], list[str]]) -> dict[str, Any]:
    tail_gaps = [
        {
            "ms": 50.0,
            "at_wall_s": 0.0,
            "request_id": rid,
            "gap": g,
            "class": "chat",
            "causes": causes,
            "prefill_tokens": 0,
        }
        for (rid, g), causes in entries.items()
    ]
    return {"run": NO_FACTS, "attribution": {"tail_gaps": tail_gaps}}


def test_precision_recall_and_coverage(tmp_path: Path) -> None:
    # true tail: r0..r9; prefill r0-r5, preemption r4-r7, r8 an engine stall, r9 nothing
    tail = {r: {} for r in range(10)}
    for r in range(6):
        tail[r]["prefill"] = 1000
    for r in range(4, 8):
        tail[r]["preempted"] = ("someone",)
    tail[8]["stall_ns"] = 40 * MS
    truth = tail_truth(tmp_path, tail)
    tags = {(f"r{r}", 100): [] for r in range(9)}  # r9's gap is missing from ours
    for r in (0, 1, 2, 3, 6):
        tags[(f"r{r}", 100)].append("prefill")
    for r in (4, 6):
        tags[(f"r{r}", 100)].append("preemption")
    tags[("r50", 3)] = ["prefill", "preemption"]  # ours, not in the true tail: not counted
    check = attribution_check(ours(tags), truth)
    assert check["available"] and check["tail_gaps"] == 10 and check["true_gaps"] == 10_100
    assert check["threshold_ms"] == 1.0 and check["requests"] == 100
    assert check["coverage"] == {
        "present": 9,
        "of": 10,
        "share": 0.9,
        "ours_listed": 10,
        "worst_ms_error": 0.0,
    }
    assert check["causes"]["prefill"] == {
        "true": 6,
        "tagged": 5,
        "both": 4,
        "precision": 0.8,
        "recall": 0.6667,
    }
    assert check["causes"]["preemption"] == {
        "true": 4,
        "tagged": 2,
        "both": 2,
        "precision": 1.0,
        "recall": 0.5,
    }
    # r8's stall explains its gap: the engine paused (old truth: no prefill_ns, so a prefill
    # step in a gap is its cause, as before)
    assert check["causes"]["server_pause"] == {
        "true": 1,
        "tagged": 0,
        "both": 0,
        "precision": None,
        "recall": 0.0,
    }
    assert check["causes"]["server_gc"]["true"] == 0  # the stall was no collection
    assert check["true_tail_causes"] == {
        "prefill": 6,
        "server_pause": 1,
        "server_gc": 0,
        "gpu_throttle": 0,
        "kv_offload": 0,
        "preemption": 4,
        "prefill_overlapped": 6,
        "none": 1,
    }
    assert check["true_prefill_tokens"]["tail_median"] == 1000.0
    met = {(t["cause"], t["measure"]): t["met"] for t in check["thresholds"]}
    assert met == {
        ("prefill", "precision"): False,
        ("prefill", "recall"): False,
        ("server_pause", "precision"): None,
        ("server_pause", "recall"): False,
        ("server_gc", "precision"): None,
        ("server_gc", "recall"): None,
        ("gpu_throttle", "precision"): None,
        ("gpu_throttle", "recall"): None,
        ("kv_offload", "precision"): None,
        ("kv_offload", "recall"): None,
        ("preemption", "recall"): False,
    }
    lines = format_attribution_check(check)
    assert lines[0] == (
        "Attribution check (true gaps above true ITL P99.9 of 1.000 ms: 10, 9 in our "
        "tail_gaps): prefill precision 0.80 (4/5) recall 0.67 (4/6); "
        "server pause precision n/a (0/0) recall 0.00 (0/1); "
        "server GC precision n/a (0/0) recall n/a (0/0); "
        "GPU throttling precision n/a (0/0) recall n/a (0/0); "
        "KV cache offload precision n/a (0/0) recall n/a (0/0); "
        "preemption precision 1.00 (2/2) recall 0.50 (2/4)"
    )
    assert "prefill precision >= 0.9 NOT met" in lines[2]
    json.dumps(check, allow_nan=False)  # summary.json is strict JSON


def test_no_true_preemption_leaves_its_figures_unassessed(tmp_path: Path) -> None:
    truth = tail_truth(tmp_path, {r: {"prefill": 10} for r in range(10)})
    check = attribution_check(ours({(f"r{r}", 100): ["prefill"] for r in range(10)}), truth)
    assert check["causes"]["prefill"]["precision"] == check["causes"]["prefill"]["recall"] == 1
    assert check["causes"]["preemption"] == {
        "true": 0,
        "tagged": 0,
        "both": 0,
        "precision": None,
        "recall": None,
    }
    assert [t["met"] for t in check["thresholds"]] == [True, True] + [None] * 9
    assert "preemption recall >= 0.8 n/a" in format_attribution_check(check)[2]


def test_a_prefill_step_inside_a_pause_overlapped_it_and_did_not_cause_it(tmp_path: Path) -> None:
    """With the step's prefill time in the truth (``prefill_ns``), a cause is one that
    explains at least a third of the gap's excess over a plain step (here the whole 50 ms
    gap: the steps' own 1 ms is all prefill or stall): a 64-token prefill (1.5 ms) in a
    40 ms engine pause overlapped the gap, the pause caused it; 40 ms of prefill beside a
    10 ms pause caused it (a fifth: not the pause); 20 ms of each, both."""
    tail = {r: {} for r in range(10)}
    for r in range(4):  # pauses with a small prefill in the same step
        tail[r] = {"prefill": 64, "prefill_ns": 1_500_000, "stall_ns": 40 * MS}
    tail[4] = {"prefill": 1600, "prefill_ns": 40 * MS, "stall_ns": 10 * MS}  # prefill
    tail[5] = {"prefill": 800, "prefill_ns": 20 * MS, "stall_ns": 20 * MS}  # both
    tail[6] = {"prefill": 1200, "prefill_ns": 30 * MS}  # prefill alone
    tail[0]["gc"] = True  # that pause was a full collection of the server's Python process
    tail[7] = {"prefill_ns": 0, "throttle_ns": 30 * MS}  # the GPU's clocks held down
    truth = tail_truth(tmp_path, tail)
    gaps = true_gaps(truth, NO_FACTS)
    assert gaps is not None
    picked = [np.flatnonzero(gaps.request_id == f"r{r}")[-1] for r in range(7)]
    assert gaps.prefill[picked].tolist() == [False] * 4 + [True, True, True]
    assert gaps.server_pause[picked].tolist() == [True] * 4 + [False, True, False]
    assert gaps.prefill_overlapped[picked].tolist() == [True] * 7
    assert gaps.server_gc[picked].tolist() == [True] + [False] * 6
    throttled = np.flatnonzero(gaps.request_id == "r7")[-1]
    assert gaps.gpu_throttle[throttled] and not gaps.gpu_throttle[picked].any()
    tags = {(f"r{r}", 100): ["server_pause"] for r in range(4)}
    tags |= {
        ("r4", 100): ["prefill"],
        ("r5", 100): ["prefill", "server_pause"],
        ("r6", 100): ["prefill"],
    }
    check = attribution_check(ours(tags), truth)
    assert check["causes"]["prefill"]["precision"] == check["causes"]["prefill"]["recall"] == 1
    pause = check["causes"]["server_pause"]
    assert pause["precision"] == pause["recall"] == 1 and pause["true"] == 5
    assert check["true_tail_causes"]["prefill_overlapped"] == 7


def test_the_gaps_sent_inside_the_window_count_as_the_truth_check_counts_them(
    tmp_path: Path,
) -> None:
    """The window in token time: a gap counts when its later event was sent inside it
    (4 ms .. 30 ms here), whatever its request's fate (sent in the warm-up, ending in the
    cool-down, aborted)."""
    steps = [step(k, prefill=7 if k == 2 else 0) for k in range(4)]
    truth = write(
        tmp_path / "truth.jsonl",
        [
            *steps,
            request("warm", [2 * MS, 3 * MS, 9 * MS], [0, 1, 2], arrival_ns=1 * MS),
            request("kept", [6 * MS, 7 * MS, 8 * MS], [0, 1, 2], arrival_ns=5 * MS),
            request("cool", [6 * MS, 7 * MS, 50 * MS], [1, 2, 3], arrival_ns=5 * MS),
            {**request("cut", [6 * MS, 7 * MS], [1, 2], arrival_ns=5 * MS), "aborted": True},
        ],
    )
    run = RunFacts(clock_start_wall_ns=1, warmup_s=0.004, duration_s=0.04, cooldown_s=0.01)
    gaps = true_gaps(truth, run)
    assert gaps is not None
    kept = sorted(zip(gaps.request_id.tolist(), gaps.gap.tolist(), strict=True))
    assert kept == [("cool", 0), ("cut", 0), ("kept", 0), ("kept", 1), ("warm", 1)]
    assert len(true_gaps(truth, NO_FACTS).request_id) == 7  # type: ignore[union-attr]  # no window


def test_unavailable_without_step_lines_attribution_or_gaps(tmp_path: Path) -> None:
    gap_mode = write(tmp_path / "gap.jsonl", [request("a", [1, 2, 3], [])])
    check = attribution_check(ours({}), gap_mode)
    assert check == {
        "available": False,
        "why": "the truth has no engine step lines: the simulator ran without a profile",
    }
    engine = write(tmp_path / "engine.jsonl", [step(0), step(1), request("a", [1, 2], [0, 1])])
    check = attribution_check({"run": NO_FACTS}, engine)
    assert check == {"available": False, "why": "summary.json has no attribution.tail_gaps"}
    assert format_attribution_check(check) == [
        "Attribution check: unavailable (summary.json has no attribution.tail_gaps)"
    ]
    single = write(tmp_path / "single.jsonl", [step(0), request("a", [1], [0])])
    assert attribution_check(ours({}), single)["why"].startswith("no true token gap")
    assert format_attribution_check(None) == []


def test_the_finishing_pass_stores_and_prints_both_checks(tmp_path: Path) -> None:
    truth = tail_truth(tmp_path, {r: {"prefill": 10} for r in range(10)})
    assert truth.name == "truth.jsonl"
    summary = ours({(f"r{r}", 100): ["prefill"] for r in range(10)})
    itl = {
        "count": 10_100,
        "p50": 1.0,
        "p90": 1.0,
        "p99": 1.0,
        "p99.9": 1.0,
        "p99.99": 50.0,
        "max": 50.0,
    }
    summary["metrics"] = {name: itl for name in ("ttft", "itl", "tpot")}
    folder = ResultsFolder(tmp_path)
    finished = finish_run(
        folder, MetricSet(), NO_FACTS, summary=summary, check_truth=True, save_histograms=False
    )
    stored = json.loads(folder.summary.read_text())
    assert stored["attribution_check"]["causes"]["prefill"]["recall"] == 1.0
    assert "truth_check" in stored and finished.truth_passed is None  # no tolerance given
    printed = "\n".join(finished.check_lines)
    assert printed.index("Truth check") < printed.index("Attribution check (true gaps above")


# -- the cause model, in virtual time --------------------------------------------------------


def truth_file(run: VirtualRun, path: Path) -> Path:
    return write(path, [*run.records, *run.steps])


def window_attribution(run: VirtualRun, sample_ms: float = 250) -> dict[str, Any]:
    """Our side as the cause-window timeline builds it: ``prefill`` for a gap that overlaps
    any request's window from its arrival to its first token; ``preemption`` for one that
    overlaps an interval between two samples of the server's metrics in which the counter
    of preemptions rose. The 1,000 largest gaps, largest first."""
    starts = np.sort([r["arrival_ns"] for r in run.records])
    ends = np.sort([r["send_ns"][0] for r in run.records])
    every = round(sample_ms * MS)
    rose = np.unique([s["start_ns"] // every * every for s in run.steps if s["preempted"]])
    rose = rose.astype(np.int64)
    listed = []
    for record in run.records:
        sends = np.asarray(record["send_ns"], dtype=np.int64)
        a, b = sends[:-1], sends[1:]
        prefill = np.searchsorted(starts, b) - np.searchsorted(ends, a, side="right") > 0
        preempt = np.searchsorted(rose, b) - np.searchsorted(rose + every, a, side="right") > 0
        for g in range(a.size):
            causes = ["prefill"] * bool(prefill[g]) + ["preemption"] * bool(preempt[g])
            listed.append(
                {
                    "ms": (b[g] - a[g]) / MS,
                    "at_wall_s": b[g] / 1e9,
                    "request_id": record["request_id"],
                    "gap": g,
                    "class": "chat",
                    "causes": causes,
                    "prefill_tokens": 0,
                }
            )
    listed.sort(key=lambda entry: -entry["ms"])
    return {"run": NO_FACTS, "attribution": {"tail_gaps": listed[:1000]}}


def open_loop(rng: random.Random, rate_per_s: float, until_ms: float, make: Any) -> list[Any]:
    requests, t = [], 0.0
    while (t := t + rng.expovariate(rate_per_s / 1000)) < until_ms:
        requests.append(make(len(requests), t))
    return requests


def test_open_loop_long_prompts_make_the_tail_and_prefill_windows_find_them(tmp_path: Path) -> None:
    rng = random.Random(3)
    chats = open_loop(
        rng, 20, 20_000, lambda i, t: VirtualRequest(f"c{i}", t, rng.randint(128, 512), 256)
    )
    longs = open_loop(rng, 0.5, 20_000, lambda i, t: VirtualRequest(f"l{i}", t, 16_000, 16))
    run = run_virtual("h200-llama3-8b", chats + longs, seed=1)
    truth = truth_file(run, tmp_path / "truth.jsonl")
    gaps = true_gaps(truth, NO_FACTS)
    assert gaps is not None
    threshold = np.percentile(gaps.itl_ns, 99.9, method="inverted_cdf")
    tail = gaps.itl_ns > threshold
    assert tail.sum() >= 30
    assert gaps.prefill[tail].mean() >= 0.9  # the cause model: the tail is prefill
    assert np.median(gaps.prefill_tokens[tail]) >= 8000  # big prompts, not a chat's
    check = attribution_check(window_attribution(run), truth)
    assert check["coverage"]["share"] == 1.0
    prefill = check["causes"]["prefill"]
    assert prefill["precision"] >= 0.9 and prefill["recall"] >= 0.9, prefill


def test_small_kv_cache_preemptions_are_in_the_tail_and_found(tmp_path: Path) -> None:
    params = engine_params(
        {
            "step_base_ms": 5.0,
            "decode_ms_per_seq": 0.05,
            "prefill_ms_per_token": 0.04,
            "max_num_seqs": 64,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 4096,
            "max_model_len": 2048,
        }
    )
    rng = random.Random(3)
    requests = open_loop(
        rng, 20, 3000, lambda i, t: VirtualRequest(f"k{i}", t, rng.randint(100, 400), 300)
    )
    run = run_virtual(params, requests, seed=1)
    assert run.preemptions > 10
    truth = truth_file(run, tmp_path / "truth.jsonl")
    check = attribution_check(window_attribution(run), truth)
    assert check["true_tail_causes"]["preemption"] >= 5
    assert check["causes"]["preemption"]["recall"] >= 0.8, check["causes"]
    # a preempted request's own gap spans its wait and its recompute prefill
    gaps = true_gaps(truth, NO_FACTS)
    assert gaps is not None
    victim = next(r for r in run.records if r["preemptions"])
    g = victim["preemptions"][0]["generated"] - 1
    own = (gaps.request_id == victim["request_id"]) & (gaps.gap == g)
    # ... its recompute overlapped it; the wait, not the prefill, stretched it
    assert gaps.preemption[own].all() and gaps.prefill_overlapped[own].all()
    assert not gaps.prefill[own].any()


@pytest.mark.parametrize("bad", [{"attribution": {"tail_gaps": "x"}}, {"attribution": None}])
def test_malformed_attribution_is_unavailable(tmp_path: Path, bad: dict[str, Any]) -> None:
    engine = write(tmp_path / "engine.jsonl", [step(0), step(1), request("a", [1, 2], [0, 1])])
    assert attribution_check({"run": NO_FACTS, **bad}, engine)["available"] is False
