"""Why the tail (``report.attribution``) from a real ``Recorder``, against brute force: the
share of the samples above each tail percentile that overlapped each cause, the prompt
tokens in prefill, the worst gaps' stories, the prune horizon, and the merge of workers."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from tpot_locust.common.timings import RequestTimings, to_us, tpot_samples_ns
from tpot_locust.metrics.causes import (
    CAUSES,
    CLIENT_STALL,
    KV_PRESSURE,
    LONG_PROMPT_TOKENS,
    NETWORK,
    PREEMPTION,
    PREFILL,
    QUEUEING,
    UNEXPLAINED,
    CauseWindow,
)
from tpot_locust.metrics.histograms import new_histogram, record_many
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.metrics.recorder import PREFILL_AT_GAP, Recorder
from tpot_locust.report.attribution import (
    TAIL_PERCENTILES,
    attribution_summary,
    format_why_the_tail,
    gap_story,
)

MS = 1_000_000
US = 1_000


@dataclass
class Req:
    """One request of the world, in wall-clock ns."""

    request_id: str
    user_class: str
    send: int
    stamps: list[int]
    counts: list[int]
    prompt: int
    process: int = 0  # which recorder sends it (the merge test's two workers)
    retransmits: int = 0  # TCP retransmissions on its connection: every gap is ``network``

    def timings(self, recorder: Recorder) -> RequestTimings:
        offset = recorder.to_wall_ns(0)
        timings = RequestTimings(self.user_class, "chat", self.request_id, self.send - offset,
                                 self.send - offset)  # fmt: skip
        timings.token_stamps.extend(stamp - offset for stamp in self.stamps)
        timings.token_counts.extend(self.counts)
        timings.output_tokens = sum(self.counts)
        timings.counts_from_usage = any(count != 1 for count in self.counts)
        timings.prompt_tokens_requested = self.prompt
        timings.retransmits = self.retransmits
        return timings


@dataclass
class Extra:
    """A window no request of the world sends: another process's prefill or the server's."""

    kind: str
    window_id: str
    start: int
    end: int
    size: float
    burst: bool = False


@dataclass
class World:
    requests: list[Req] = field(default_factory=list)
    extras: list[Extra] = field(default_factory=list)
    stall: tuple[int, int] | None = None

    def windows(self) -> list[tuple[str, int, int, float, bool]]:
        """Every cause window: (kind, start, end, size, burst)."""
        found = [(PREFILL, r.send, r.stamps[0], float(r.prompt), False) for r in self.requests]
        found += [(e.kind, e.start, e.end, e.size, e.burst) for e in self.extras]
        if self.stall:
            found.append((CLIENT_STALL, *self.stall, 0.0, False))
        return found


def play(world: World, recorders: list[Recorder], route, tick_ns: int = 100 * MS,
         relay: bool = False) -> list[MetricSet]:  # fmt: skip
    """Feed the world to the recorders in time order, as a run does: each request's prefill
    window at its send and first token (``on_prefill``, perf stamps), its timings at its
    end, the extra windows as they open and close, and every ``tick_ns`` an interval taken
    (``final``: every finished request tagged, then the timeline pruned), after relaying
    the recorders' new windows to all of them when ``relay``. ``route(item)``: the indexes
    of the recorders that see an item directly. Returns each recorder's totals."""
    events: list[tuple[int, int, str, object]] = []
    for req in world.requests:
        events += [(req.send, 0, "open", req), (req.stamps[0], 1, "first", req),
                   (req.stamps[-1], 2, "end", req)]  # fmt: skip
    for extra in world.extras:
        events += [(extra.start, 0, "x-open", extra), (extra.end, 1, "x-close", extra)]
    first = min(t for t, *_ in events)
    last = max(t for t, *_ in events)
    events += [(t, 9, "tick", None) for t in range(first + tick_ns, last + 2 * tick_ns, tick_ns)]
    events.sort(key=lambda event: (event[0], event[1]))
    totals = [MetricSet() for _ in recorders]
    if world.stall:
        for index in route(world.stall):
            recorder = recorders[index]
            offset = recorder.to_wall_ns(0)
            recorder.on_stall(world.stall[0] - offset, world.stall[1] - offset)
    for t, _, what, item in events:
        if what == "tick":
            if relay:
                batch = [w for r in recorders for w in r.causes.take_outgoing()]
                for recorder in recorders:  # the master relays to every worker, echo too
                    recorder.causes.apply_wire(batch)
            for recorder, total in zip(recorders, totals, strict=True):
                delta = recorder.take_interval(final=True)
                total.add(MetricSet.decode(delta.encode()))  # as shipped to the master
            continue
        for index in route(item):
            recorder = recorders[index]
            offset = recorder.to_wall_ns(0)
            if isinstance(item, Req):
                start = item.send - offset
                if what == "open":
                    recorder.on_prefill(item.request_id, start, None, item.prompt)
                elif what == "first":
                    recorder.on_prefill(item.request_id, start, t - offset, item.prompt)
                else:
                    recorder.record(item.timings(recorder))
            else:
                assert isinstance(item, Extra)
                end = None if what == "x-open" else item.end
                window = CauseWindow(item.kind, item.window_id, item.start, end, item.size,
                                     item.burst)  # fmt: skip
                if item.kind == PREFILL:  # another process's: relayed by the master
                    recorder.causes.apply_wire([window.to_wire()])
                else:  # the server's windows, from the sampler
                    recorder.causes.add(window)
    return totals


def make_world(seed: int, requests: int, classes: tuple[str, ...] = ("chat",),
               processes: int = 1) -> World:  # fmt: skip
    """Waves of requests (their prefills overlap the running ones' gaps) with quiet spells
    between (gaps that overlap nothing), long gaps here and there, events of 1-3 tokens,
    prompts from 50 to 16k tokens, server windows and other processes' prefills."""
    rng = np.random.default_rng(seed)
    base = time.time_ns() - 600 * 1_000_000_000
    long_gaps_us = iter(rng.choice(np.arange(20_000, 400_000), requests * 20, replace=False))
    world = World()
    for number in range(requests):
        send = base + (number // 8) * 1500 * MS + int(rng.integers(0, 250)) * MS
        first = send + int(rng.integers(5, 60)) * MS
        events = int(rng.integers(30, 70))
        gaps = rng.integers(800, 3000, events - 1) * US  # whole microseconds
        for index in np.flatnonzero(rng.random(events - 1) < 0.06):
            gaps[index] = next(long_gaps_us) * US
        stamps = [first, *(first + np.cumsum(gaps)).tolist()]
        counts = [1, *rng.choice([1, 1, 1, 2, 3], events - 1).tolist()]
        world.requests.append(Req(
            f"r{number}", classes[number % len(classes)], send, [int(s) for s in stamps],
            [int(c) for c in counts], int(rng.choice([50, 200, 1000, 4000, 16000])),
            process=(number // len(classes)) % processes,  # classes on both processes
            retransmits=int(rng.random() < 0.15),
        ))  # fmt: skip
    end = max(r.stamps[-1] for r in world.requests)
    span = end - base
    for number in range(8):
        start = base + int(rng.integers(0, span))
        world.extras.append(Extra(PREFILL, f"other{number}", start,
                                  start + int(rng.integers(20, 150)) * MS,
                                  float(rng.choice([500, 8000, 20000]))))  # fmt: skip
    for kind, count, size in ((PREEMPTION, 6, 1.0), (KV_PRESSURE, 2, 0.97), (QUEUEING, 3, 2)):
        for number in range(count):
            start = base + int(rng.integers(0, span))
            length = int(rng.integers(30, 400 if kind == KV_PRESSURE else 120)) * MS
            world.extras.append(Extra(kind, f"{kind}{number}", start, start + length, size))
    return world


@dataclass
class Gap:
    itl_us: int
    tpot_us: list[int]
    causes: set[str]
    prefill_tokens: int
    prefill_requests: int
    request_id: str
    index: int
    in_burst: bool  # a prefill of a burst or of at least LONG_PROMPT_TOKENS overlapped it


def brute_gaps(world: World, user_class: str | None = None) -> list[Gap]:
    """Every token gap with what overlapped it: windows with start < gap end and end > gap
    start."""
    windows = world.windows()
    found = []
    for req in world.requests:
        if user_class is not None and req.user_class != user_class:
            continue
        stamps = np.array(req.stamps, dtype=np.int64)
        itl = stamps[1:] - stamps[:-1]
        tpot = to_us(tpot_samples_ns(itl, np.array(req.counts[1:], dtype=np.int64)))
        tpot_by_gap = np.split(tpot, np.cumsum(req.counts[1:])[:-1])
        for index in range(itl.size):
            a, b = int(stamps[index]), int(stamps[index + 1])
            over = [w for w in windows if w[1] < b and w[2] > a]
            prefills = [w for w in over if w[0] == PREFILL]
            causes = {w[0] for w in over} | ({NETWORK} if req.retransmits else set())
            long = any(w[4] or w[3] >= LONG_PROMPT_TOKENS for w in prefills)
            found.append(Gap(int(to_us(itl[index : index + 1])[0]), tpot_by_gap[index].tolist(),
                             causes, round(sum(w[3] for w in prefills)), len(prefills),
                             req.request_id, index, long))  # fmt: skip
    return found


def expected_rows(gaps: list[Gap], attribution: dict, metric: str) -> None:
    """The summary's rows of ``metric`` against the brute-force shares."""
    if metric == "itl":
        samples = [(gap.itl_us, gap.causes) for gap in gaps]
    else:
        samples = [(value, gap.causes) for gap in gaps for value in gap.tpot_us]
    present = {cause for _, causes in samples for cause in causes}
    if any(not causes for _, causes in samples):
        present.add(UNEXPLAINED)
    ordered = [cause for cause in (*CAUSES, UNEXPLAINED) if cause in present]
    rows = attribution[metric]
    assert list(rows) == [f"p{p:g}" for p in TAIL_PERCENTILES]
    for percentile in TAIL_PERCENTILES:
        row = rows[f"p{percentile:g}"]
        threshold_us = round(row["above_ms"] * 1000)
        values = np.array([value for value, _ in samples])
        # the threshold is the percentile (the highest value of its bucket)
        assert np.count_nonzero(values <= threshold_us) >= int(percentile / 100 * values.size + 0.5)
        tail = [causes for value, causes in samples if value > threshold_us]
        assert row["samples"] == len(tail)
        assert list(row["shares"]) == ordered
        for cause in ordered:
            hit = sum(1 for causes in tail if (cause in causes if cause != UNEXPLAINED
                                                else not causes))  # fmt: skip
            wanted = round(hit / len(tail), 4) if tail else None
            assert row["shares"][cause] == wanted, (metric, percentile, cause)


def check_prefill_tokens(gaps: list[Gap], attribution: dict, metrics: ClassMetrics) -> None:
    tokens = attribution["prefill_tokens"]
    reference = new_histogram()
    record_many(reference, np.array([gap.prefill_tokens for gap in gaps], dtype=np.int64))
    at_gaps = metrics.histograms[PREFILL_AT_GAP]
    assert at_gaps.total_count == len(gaps)
    assert at_gaps.get_value_at_percentile(50) == reference.get_value_at_percentile(50)
    assert tokens["all_gaps_median"] == reference.get_value_at_percentile(50)
    for key, row in attribution["itl"].items():
        tail = [gap.prefill_tokens for gap in gaps if gap.itl_us > round(row["above_ms"] * 1000)]
        assert tokens[f"{key}_median"] == (int(np.median(tail)) if tail else None)


def check_worst(gaps: list[Gap], attribution: dict) -> None:
    worst = sorted(gaps, key=lambda gap: gap.itl_us, reverse=True)[:10]
    got = attribution["worst"]
    assert len(got) == len(worst)
    for gap, told in zip(worst, got, strict=True):
        assert told["ms"] == gap.itl_us / 1000
        assert (told["request_id"], told["gap"]) == (gap.request_id, gap.index)
        assert told["causes"] == [cause for cause in CAUSES if cause in gap.causes]
        assert told["prefill_tokens"] == gap.prefill_tokens
        assert told["prefill_requests"] == gap.prefill_requests
        assert told["client_stall"] == (CLIENT_STALL in gap.causes)
        story = told["story"]
        assert story == gap_story(told) and story.startswith(f"{gap.itl_us / 1000:.1f} ms: ")
        if PREFILL in gap.causes:
            prompts = "1 prompt" if gap.prefill_requests == 1 else f"{gap.prefill_requests} prompts"
            assert f"{prompts} in prefill ({gap.prefill_tokens:,} tokens" in story
        for cause in gap.causes - {PREFILL}:
            assert cause.replace("_", " ") in story
        if not gap.causes:
            assert story.endswith("no cause overlapped")


def single_run(seed: int = 2, requests: int = 40) -> tuple[World, ClassMetrics, dict]:
    world = make_world(seed, requests)
    # a stall of this process's loop inside a long gap that overlaps nothing else
    quiet = next(g for g in brute_gaps(world) if not g.causes and g.itl_us >= 20_000)
    start = next(r for r in world.requests if r.request_id == quiet.request_id).stamps[quiet.index]
    world.stall = (start + 5 * MS, start + 15 * MS)
    recorder = Recorder()
    (total,) = play(world, [recorder], lambda item: [0])
    metrics = total.for_group("chat")
    attribution = attribution_summary(metrics, keep_tail=True)
    assert attribution is not None
    return world, metrics, attribution


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
    sums = [sum(v for c, v in row["shares"].items() if c != UNEXPLAINED and v is not None)
            for name in ("itl", "tpot") for row in attribution[name].values()]  # fmt: skip
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
    assert [g["ms"] for g in kept] == sorted((g.itl_us / 1000 for g in gaps),
                                             reverse=True)[: len(kept)]  # fmt: skip


def test_format_why_the_tail_shows_the_rows() -> None:
    world, _, attribution = single_run()
    origin_s = min(r.send for r in world.requests) / 1e9
    lines = format_why_the_tail({"attribution": attribution, "run": {"start_wall_s": origin_s}})
    text = "\n".join(lines)
    assert lines[0].startswith("Why the tail")
    causes = list(attribution["itl"]["p99"]["shares"])
    header = lines[1]
    assert all(cause in header for cause in causes)
    for name in ("tpot", "itl"):
        for key, row in attribution[name].items():
            label = f"{name.upper()} {key}"
            line = next(line for line in lines if line.strip().startswith(label + " "))
            assert f"{row['above_ms']:.3f}" in line and f"{row['samples']:,}" in line
            for cause in causes:
                share = row["shares"].get(cause)
                assert (f"{share * 100:.1f}%" if share is not None else "-") in line
    tokens = attribution["prefill_tokens"]
    assert f"every gap {tokens['all_gaps_median']:,}" in text
    assert f"p99 {tokens['p99_median']:,}" in text
    assert "need not sum to 100 %" in text
    for gap in attribution["worst"][:5]:
        story = gap_story(gap, origin_s)
        assert f" at {gap['at_wall_s'] - origin_s:.1f} s: " in story
        assert f"  {story}" in lines
    assert format_why_the_tail({}) == [] and format_why_the_tail({"attribution": None}) == []


def test_no_gap_no_attribution() -> None:
    assert attribution_summary(ClassMetrics(), keep_tail=False) is None
    recorder = Recorder()
    req = Req("one", "chat", 10**18, [10**18 + MS], [1], 10)  # one event: no gap
    recorder.record(req.timings(recorder))
    metrics = recorder.take_interval(final=True).for_group("chat")
    assert attribution_summary(metrics, keep_tail=False) is None


def test_stories_of_single_gaps() -> None:
    base = time.time_ns() - 100 * 1_000_000_000
    world = World(requests=[Req("long", "chat", base, [base + 10 * MS, base + 310 * MS,
                                                       base + 312 * MS, base + 512 * MS], [1] * 4,
                                100)])  # fmt: skip
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
        "300.0 ms: 2 prompts in prefill (24,000 tokens, ours), preemption, kv pressure",
        "200.0 ms: 1 prompt in prefill (3,000 tokens, ours), kv pressure",
        "2.0 ms: kv pressure",
    ]
    assert gap_story({"ms": 5.0}) == "5.0 ms: no cause overlapped"
    at = attribution["worst"][0]["at_wall_s"]
    assert gap_story(attribution["worst"][0], at - 12.34).startswith("300.0 ms at 12.3 s: ")
    assert attribution["worst"][0]["phase"] == "burst"  # 16k >= the long-prompt threshold
    assert attribution["worst"][1]["phase"] == "burst"  # 3000 too
    # [24000, 0, 3000]: the median from a histogram, the highest value of its bucket
    assert attribution["prefill_tokens"]["all_gaps_median"] == 3001


def test_stories_tell_the_servers_state_over_the_gap() -> None:
    series = {"t_wall_s": [10.0, 10.25, 10.5, 10.75, 11.0],
              "kv_usage": [0.5, 0.97, None, 0.8, 0.5], "waiting": [0, 3, 0, 0, 0],
              "preemptions": [0, 1, 0, 2, 5]}  # fmt: skip
    gap = {"ms": 200.0, "at_wall_s": 10.6, "causes": [PREFILL, PREEMPTION, KV_PRESSURE, QUEUEING],
           "prefill_requests": 3, "prefill_tokens": 48000}  # fmt: skip
    # the samples whose intervals overlap [10.4, 10.6]: (10.25, 10.5] and (10.5, 10.75]
    assert gap_story(gap, 10.0, series) == (
        "200.0 ms at 0.6 s: 3 prompts in prefill (48,000 tokens, ours), "
        "2 preemptions in that interval, KV cache 97 %, 3 waiting"
    )
    late = gap | {"at_wall_s": 11.5}  # after the last sample: the causes' names only
    assert gap_story(late, None, series).endswith("ours), preemption, kv pressure, queueing")
    one = gap | {"causes": [PREEMPTION], "at_wall_s": 10.2, "ms": 100.0}  # [10.1, 10.2]
    assert gap_story(one, None, series) == "100.0 ms: 1 preemption in that interval"
    quiet = gap | {"causes": [PREEMPTION], "at_wall_s": 10.4, "ms": 100.0}  # (10.25, 10.5]
    assert gap_story(quiet, None, series) == "100.0 ms: preemption"  # it counted none


# --- the prune horizon: a long request still in flight keeps its windows -------------


def staggered(base: int) -> tuple[Req, Req, list[Req]]:
    """A long request whose first gap overlaps, early in its life, the prefill of a short
    request that ends long before it; later short requests sent after that prefill ended."""
    long = Req("long", "chat", base, [base + 1 * MS, base + 20 * MS, base + 900 * MS],
               [1, 1, 1], 10)  # fmt: skip
    early = Req("early", "chat", base + 2 * MS, [base + 5 * MS, base + 6 * MS], [1, 1], 16000)
    later = [Req(f"s{i}", "chat", base + (100 + 100 * i) * MS,
                 [base + (101 + 100 * i) * MS, base + (102 + 100 * i) * MS], [1, 1], 10)
             for i in range(3)]  # fmt: skip
    return long, early, later


def open_and_first(recorder: Recorder, req: Req) -> None:
    offset = recorder.to_wall_ns(0)
    recorder.on_prefill(req.request_id, req.send - offset, None, req.prompt)
    recorder.on_prefill(req.request_id, req.send - offset, req.stamps[0] - offset, req.prompt)


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
        recorder.record(short.timings(recorder))
        total.add(recorder.take_interval(final=True))  # tags it, then prunes
    recorder.record(long.timings(recorder))
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
    recorder.record(early.timings(recorder))
    recorder.record(later[0].timings(recorder))
    recorder.flush()  # held, due now
    hold_for(monkeypatch, 1000.0)
    recorder.record(later[1].timings(recorder))  # held first of those not due yet
    recorder.record(long.timings(recorder))  # then the long one, sent before them all
    recorder.record(later[2].timings(recorder))
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
    result["tail_gaps"] = sorted(attribution["tail_gaps"],
                                 key=lambda g: (g["ms"], g["request_id"], g["gap"]))  # fmt: skip
    return result


def test_two_workers_merged_equal_one_process_that_saw_everything() -> None:
    classes = ("chat", "rag")
    world = make_world(5, 14, classes=classes, processes=2)
    # a probe: in a quiet spell after everything, a request of worker B with one long gap
    # during which only a request of worker A is in prefill
    quiet = max(r.stamps[-1] for r in world.requests) + 2000 * MS
    probe_b = Req("b-probe", "chat", quiet, [quiet + 10 * MS, quiet + 610 * MS, quiet + 612 * MS],
                  [1, 1, 1], 10, process=1)  # fmt: skip
    probe_a = Req("a-probe", "rag", quiet + 100 * MS, [quiet + 300 * MS, quiet + 302 * MS],
                  [1, 1], 16000, process=0)  # fmt: skip
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
    probe = next(g for g in merged.for_group("chat").tail_gaps if g["request_id"] == "b-probe"
                 and g["gap"] == 0)  # fmt: skip
    assert probe["causes"] == [PREFILL] and probe["prefill_tokens"] == 16000
    assert probe["prefill_requests"] == 1 and probe["phase"] == "burst"


def test_without_the_relay_a_worker_misses_the_other_workers_prefill() -> None:
    """The control of the merge test: the probe's cause comes from the relay only."""
    quiet = time.time_ns() - 100 * 1_000_000_000
    world = World(requests=[
        Req("b-probe", "chat", quiet, [quiet + 10 * MS, quiet + 610 * MS], [1, 1], 10, 1),
        Req("a-probe", "chat", quiet + 100 * MS, [quiet + 300 * MS, quiet + 302 * MS], [1, 1],
            16000, 0),
    ])  # fmt: skip
    for relay, wanted in ((False, []), (True, [PREFILL])):
        workers = [Recorder(), Recorder()]
        for worker in workers:
            worker.causes.sharing = True
        totals = play(world, workers, lambda item: [item.process], relay=relay)
        (gap,) = totals[1].for_group("chat").tail_gaps
        assert gap["causes"] == wanted, relay
