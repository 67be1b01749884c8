"""Why the tail (``report.attribution``) from a real ``Recorder``, against brute force: the
share of the samples above each tail percentile that overlapped each cause, the prompt
tokens in prefill, the worst gaps' stories, the prune horizon, and the merge of workers."""

from __future__ import annotations

import re
import sys
import time

import pytest

from tests.helpers.attribution_world import (
    MS,
    Extra,
    Req,
    World,
    brute_gaps,
    check_prefill_tokens,
    check_worst,
    expected_rows,
    make_world,
    play,
    single_run,
)
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.causes import (
    CAUSES,
    CLIENT_STALL,
    KV_PRESSURE,
    NETWORK,
    PREEMPTION,
    PREFILL,
    QUEUEING,
    UNEXPLAINED,
)
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.metrics.recorder import PREFILL_AT_GAP, Recorder
from tpot_locust.report.attribution import (
    attribution_summary,
    cause_title,
    format_why_the_tail,
    gap_story,
    shares_of_100,
)


def test_shares_above_each_tail_percentile_equal_brute_force() -> None:
    world, metrics, attribution = single_run()
    gaps = brute_gaps(world)
    assert metrics.histograms["itl"].total_count == len(gaps)
    # every gap, not only the tail's, went into the histogram of each cause it overlapped
    for cause in (*CAUSES, UNEXPLAINED):
        wanted = sum(
            1 for g in gaps if (cause in g.causes if cause != UNEXPLAINED else not g.causes)
        )
        histogram = metrics.histograms.get(f"itl@{cause}")
        assert (histogram.total_count if histogram else 0) == wanted, cause
    assert any(g.causes == {CLIENT_STALL} for g in gaps)  # a stall alone is a cause, not none
    expected_rows(gaps, attribution, "itl")
    expected_rows(gaps, attribution, "tpot")
    p99 = attribution["itl"]["p99"]["shares"]
    # the world is one where the test means something: mixed causes above P99, some none
    assert 0 < p99[PREFILL] < 1 and 0 < p99[UNEXPLAINED] < 1
    assert set(p99) >= {PREFILL, PREEMPTION, KV_PRESSURE, QUEUEING, NETWORK, UNEXPLAINED}
    assert attribution["note"].startswith("a gap can overlap several causes")
    # causes overlap: some row's shares of causes sum above 1
    sums = [
        sum(v for c, v in row["shares"].items() if c != UNEXPLAINED and v is not None)
        for name in ("itl", "tpot")
        for row in attribution[name].values()
    ]
    assert max(sums) > 1
    assert len(attribution["tail_gaps"]) == min(len(gaps), 1000)


def test_prefill_tokens_and_worst_stories_equal_brute_force() -> None:
    world, metrics, attribution = single_run()
    gaps = brute_gaps(world)
    check_prefill_tokens(gaps, attribution, metrics)
    check_worst(gaps, attribution)
    # the kept gaps are the largest, each with its causes
    kept = attribution["tail_gaps"]
    by_place = {(gap.request_id, gap.index): gap for gap in gaps}
    for told in kept:
        gap = by_place[(told["request_id"], told["gap"])]
        assert told["causes"] == [cause for cause in CAUSES if cause in gap.causes]
        assert told["prefill_tokens"] == gap.prefill_tokens
        assert told["prefill_requests"] == gap.prefill_requests
        assert told["phase"] == ("burst" if gap.in_burst else "steady")
    assert [g["ms"] for g in kept] == sorted((g.itl_us / 1000 for g in gaps), reverse=True)[
        : len(kept)
    ]


def test_format_why_the_tail_shows_the_rows() -> None:
    world, _, attribution = single_run()
    origin_s = min(r.send for r in world.requests) / 1e9
    lines = format_why_the_tail(
        {"attribution": attribution, "run": RunFacts(start_wall_s=origin_s)}
    )
    text = "\n".join(lines)
    assert lines[0].startswith("Why the tail: share of the samples above each percentile")
    causes = list(attribution["itl"]["p99"]["shares"])
    header = lines[1]
    assert all(cause_title(cause) in header for cause in causes)
    assert "_" not in header  # people's names: server pause, not server_pause
    for name in ("tpot", "itl"):
        for key, row in attribution[name].items():
            label = f"{name.upper()} {key}"
            line = next(line for line in lines if line.strip().startswith(label + " "))
            assert f"{row['above_ms']:.3f}" in line and f"{row['samples']:,}" in line
            parts = shares_of_100(row["shares"], digits=1)
            for cause in causes:
                assert (f"{parts[cause]:.1f}%" if cause in parts else "-") in line
            if parts:  # a row adds up to 100 %, whatever the causes overlapped
                shown = [float(cell) for cell in re.findall(r"([\d.]+)%", line)]
                assert round(sum(shown), 1) == 100.0, line
    tokens = attribution["prefill_tokens"]
    share = tokens["all_gaps_in_prefill"] / tokens["all_gaps"]
    assert f"gaps with a prompt in prefill: every gap {share:.1%}" in text
    assert "a row adds up to 100 %" in text
    for gap in attribution["worst"][:5]:
        story = gap_story(gap, origin_s)
        assert f" at {gap['at_wall_s'] - origin_s:.1f} s: " in story
        assert f"  {story}" in lines
    assert format_why_the_tail({}) == [] and format_why_the_tail({"attribution": None}) == []


def test_no_gap_no_attribution() -> None:
    assert attribution_summary(ClassMetrics(), keep_tail=False) is None
    recorder = Recorder()
    req = Req("one", "chat", 10**18, [10**18 + MS], [1], 10)  # one event: no gap
    recorder.record(req.timings())
    metrics = recorder.take_interval(final=True).for_group("chat")
    assert attribution_summary(metrics, keep_tail=False) is None


def test_stories_of_single_gaps() -> None:
    base = time.time_ns() - 100 * 1_000_000_000
    world = World(
        requests=[
            Req(
                "long",
                "chat",
                base,
                [base + 10 * MS, base + 310 * MS, base + 312 * MS, base + 512 * MS],
                [1] * 4,
                100,
            )
        ]
    )
    world.extras = [
        Extra(PREFILL, "a", base + 20 * MS, base + 120 * MS, 16000.0),
        Extra(PREFILL, "b", base + 100 * MS, base + 200 * MS, 8000.0),
        Extra(PREEMPTION, "p", base + 50 * MS, base + 60 * MS, 1.0),
        Extra(KV_PRESSURE, "k", base + 40 * MS, base + 320 * MS, 0.97),
        Extra(PREFILL, "c", base + 400 * MS, base + 450 * MS, 3000.0),
    ]
    recorder = Recorder()
    (total,) = play(world, [recorder], lambda item: [0])
    attribution = attribution_summary(total.for_group("chat"), keep_tail=False)
    assert attribution is not None and "tail_gaps" not in attribution
    stories = [gap["story"] for gap in attribution["worst"]]
    assert stories == [
        "300.0 ms: 2 prompts in prefill (24,000 tokens, ours), preemption, KV pressure",
        "200.0 ms: 1 prompt in prefill (3,000 tokens, ours), KV pressure",
        "2.0 ms: KV pressure",
    ]
    assert gap_story({"ms": 5.0}) == "5.0 ms: no cause overlapped"
    at = attribution["worst"][0]["at_wall_s"]
    assert gap_story(attribution["worst"][0], at - 12.34).startswith("300.0 ms at 12.3 s: ")
    assert attribution["worst"][0]["phase"] == "burst"  # 16k >= the long-prompt threshold
    assert attribution["worst"][1]["phase"] == "burst"  # 3000 too
    # [24000, 0, 3000]: the median from a histogram, the highest value of its bucket
    tokens = attribution["prefill_tokens"]
    assert tokens["all_gaps_median"] == 3001
    # two of the three overlapped a prefill: the median of those (the lower of two)
    assert (tokens["all_gaps"], tokens["all_gaps_in_prefill"]) == (3, 2)
    assert tokens["all_gaps_in_prefill_median"] == 3001


def test_stories_tell_the_servers_state_over_the_gap() -> None:
    series = {
        "t_wall_s": [10.0, 10.25, 10.5, 10.75, 11.0],
        "kv_usage": [0.5, 0.97, None, 0.8, 0.5],
        "waiting": [0, 3, 0, 0, 0],
        "preemptions": [0, 1, 0, 2, 5],
    }
    gap = {
        "ms": 200.0,
        "at_wall_s": 10.6,
        "causes": [PREFILL, PREEMPTION, KV_PRESSURE, QUEUEING],
        "prefill_requests": 3,
        "prefill_tokens": 48000,
    }
    # the samples whose intervals overlap [10.4, 10.6]: (10.25, 10.5] and (10.5, 10.75]
    assert gap_story(gap, 10.0, series) == (
        "200.0 ms at 0.6 s: 3 prompts in prefill (48,000 tokens, ours), "
        "2 preemptions in that interval, KV cache 97 %, 3 waiting"
    )
    late = gap | {"at_wall_s": 11.5}  # after the last sample: the causes' names only
    assert gap_story(late, None, series).endswith("ours), preemption, KV pressure, queueing")
    one = gap | {"causes": [PREEMPTION], "at_wall_s": 10.2, "ms": 100.0}  # [10.1, 10.2]
    assert gap_story(one, None, series) == "100.0 ms: 1 preemption in that interval"
    quiet = gap | {"causes": [PREEMPTION], "at_wall_s": 10.4, "ms": 100.0}  # (10.25, 10.5]
    assert gap_story(quiet, None, series) == "100.0 ms: preemption"  # it counted none


# --- the prune horizon: a long request still in flight keeps its windows -------------


def staggered(base: int) -> tuple[Req, Req, list[Req]]:
    """A long request whose first gap overlaps, early in its life, the prefill of a short
    request that ends long before it; later short requests sent after that prefill ended."""
    long = Req(
        "long", "chat", base, [base + 1 * MS, base + 20 * MS, base + 900 * MS], [1, 1, 1], 10
    )
    early = Req("early", "chat", base + 2 * MS, [base + 5 * MS, base + 6 * MS], [1, 1], 16000)
    later = [
        Req(
            f"s{i}",
            "chat",
            base + (100 + 100 * i) * MS,
            [base + (101 + 100 * i) * MS, base + (102 + 100 * i) * MS],
            [1, 1],
            10,
        )
        for i in range(3)
    ]
    return long, early, later


def open_and_first(recorder: Recorder, req: Req) -> None:
    recorder.on_prefill(req.request_id, req.send, None, req.prompt)
    recorder.on_prefill(req.request_id, req.send, req.stamps[0], req.prompt)


def long_first_gap(metrics: ClassMetrics) -> dict:
    return next(g for g in metrics.tail_gaps if g["request_id"] == "long" and g["gap"] == 0)


def test_a_request_in_flight_keeps_a_window_that_closed_early_in_its_life() -> None:
    """Shorter requests end and are tagged (and the timeline pruned) while the long one
    runs: the window that ended long before must still be there when the long one ends."""
    recorder = Recorder()
    long, early, later = staggered(time.time_ns() - 100 * 1_000_000_000)
    open_and_first(recorder, long)
    total = MetricSet()
    for short in [early, *later]:
        open_and_first(recorder, short)
        recorder.record(short.timings())
        total.add(recorder.take_interval(final=True))  # tags it, then prunes
    recorder.record(long.timings())
    total.add(recorder.take_interval(final=True))
    metrics = total.for_group("chat")
    gap = long_first_gap(metrics)
    assert gap["causes"] == [PREFILL] and gap["prefill_tokens"] == 16000
    assert gap["phase"] == "burst"
    assert metrics.histograms["itl@prefill"].total_count == 2  # its later gap: s0..s2's
    # and once nothing is in flight, the timeline forgets what no gap can overlap any more
    assert len(recorder.causes) == 0


def hold_for(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Gaps of requests finished from now on wait ``seconds`` before they are tagged."""
    holders = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("tpot_locust.metrics") and hasattr(module, "TAG_HOLD_S")
    ]
    assert holders
    for module in holders:
        monkeypatch.setattr(module, "TAG_HOLD_S", seconds)


def test_a_held_request_sent_first_keeps_its_windows_whatever_the_order_they_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Held gaps wait in the order their requests ended: the prune horizon is the oldest
    send of all of them, not the first one's."""
    recorder = Recorder()
    long, early, later = staggered(time.time_ns() - 100 * 1_000_000_000)
    for req in (long, early, *later):
        open_and_first(recorder, req)
    hold_for(monkeypatch, 0.0)
    recorder.record(early.timings())
    recorder.record(later[0].timings())
    recorder.flush()  # held, due now
    hold_for(monkeypatch, 1000.0)
    recorder.record(later[1].timings())  # held first of those not due yet
    recorder.record(long.timings())  # then the long one, sent before them all
    recorder.record(later[2].timings())
    recorder.flush()
    total = MetricSet()
    total.add(recorder.take_interval())  # tags the two due, prunes
    assert total.for_group("chat").histograms[PREFILL_AT_GAP].total_count == 2  # tagged
    assert len(recorder.causes) >= 1  # the early prefill is kept for the long request
    total.add(recorder.take_interval(final=True))
    gap = long_first_gap(total.for_group("chat"))
    assert gap["causes"] == [PREFILL] and gap["prefill_tokens"] == 16000


# --- the merge: two workers, one master ---------------------------------------------


def comparable(attribution: dict | None) -> dict | None:
    """Tied gaps may be kept in another order by a merge: compare the kept gaps as a set."""
    if attribution is None:
        return None
    result = dict(attribution)
    result["tail_gaps"] = sorted(
        attribution["tail_gaps"], key=lambda g: (g["ms"], g["request_id"], g["gap"])
    )
    return result


def test_two_workers_merged_equal_one_process_that_saw_everything() -> None:
    classes = ("chat", "rag")
    world = make_world(5, 14, classes=classes, processes=2)
    # a probe: in a quiet spell after everything, a request of worker B with one long gap
    # during which only a request of worker A is in prefill
    quiet = max(r.stamps[-1] for r in world.requests) + 2000 * MS
    probe_b = Req(
        "b-probe",
        "chat",
        quiet,
        [quiet + 10 * MS, quiet + 610 * MS, quiet + 612 * MS],
        [1, 1, 1],
        10,
        process=1,
    )
    probe_a = Req(
        "a-probe",
        "rag",
        quiet + 100 * MS,
        [quiet + 300 * MS, quiet + 302 * MS],
        [1, 1],
        16000,
        process=0,
    )
    world.requests += [probe_b, probe_a]
    assert sum(len(r.stamps) - 1 for r in world.requests) < 1000  # every gap kept: no ties cut

    def route(item: object) -> list[int]:
        if isinstance(item, Req):
            return [item.process, 2]  # its worker, and the process that sees everything
        if item.kind == PREFILL:  # a third process's: the master relays it to every worker
            return [0, 1, 2]
        return [0, 2]  # the server's: sampled by the master (played by A), relayed to B

    workers = [Recorder(), Recorder(), Recorder()]
    workers[0].causes.sharing = workers[1].causes.sharing = True
    totals = play(world, workers, route, relay=True)
    merged = MetricSet()
    merged.add(totals[0])
    merged.add(totals[1])
    alone = totals[2]
    for user_class in classes:
        got = attribution_summary(merged.for_group(user_class), keep_tail=True)
        wanted = attribution_summary(alone.for_group(user_class), keep_tail=True)
        assert comparable(got) == comparable(wanted), user_class
        expected_rows(brute_gaps(world, user_class), got, "itl")
        expected_rows(brute_gaps(world, user_class), got, "tpot")
    assert comparable(attribution_summary(merged.combined(), keep_tail=True)) == comparable(
        attribution_summary(alone.combined(), keep_tail=True)
    )
    probe = next(
        g
        for g in merged.for_group("chat").tail_gaps
        if g["request_id"] == "b-probe" and g["gap"] == 0
    )
    assert probe["causes"] == [PREFILL] and probe["prefill_tokens"] == 16000
    assert probe["prefill_requests"] == 1 and probe["phase"] == "burst"


def test_without_the_relay_a_worker_misses_the_other_workers_prefill() -> None:
    """The control of the merge test: the probe's cause comes from the relay only."""
    quiet = time.time_ns() - 100 * 1_000_000_000
    world = World(
        requests=[
            Req("b-probe", "chat", quiet, [quiet + 10 * MS, quiet + 610 * MS], [1, 1], 10, 1),
            Req(
                "a-probe",
                "chat",
                quiet + 100 * MS,
                [quiet + 300 * MS, quiet + 302 * MS],
                [1, 1],
                16000,
                0,
            ),
        ]
    )
    for relay, wanted in ((False, []), (True, [PREFILL])):
        workers = [Recorder(), Recorder()]
        for worker in workers:
            worker.causes.sharing = True
        totals = play(world, workers, lambda item: [item.process], relay=relay)
        (gap,) = totals[1].for_group("chat").tail_gaps
        assert gap["causes"] == wanted, relay
