"""A world of requests, cause windows and a stall, fed to real ``Recorder``s as a run
would feed them, and the brute-force answers ``report.attribution`` must give for it (every
gap with the causes it overlapped): what ``test_attribution`` checks against."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

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
from tpot_locust.metrics.explaining import GapScale
from tpot_locust.metrics.histograms import new_histogram, record_many
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.metrics.recorder import PREFILL_AT_GAP, Recorder
from tpot_locust.metrics.wire_delta import decode_delta, encode_delta
from tpot_locust.report.attribution import (
    TAIL_PERCENTILES,
    attribution_summary,
    cause_title,
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

    def timings(self) -> RequestTimings:
        timings = RequestTimings(self.user_class, "chat", self.request_id, self.send, self.send)
        timings.token_stamps.extend(self.stamps)
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


def play(
    world: World,
    recorders: list[Recorder],
    route,
    tick_ns: int = 100 * MS,
    relay: bool = False,
    learning: bool = False,
) -> list[MetricSet]:
    """Feed the world to the recorders in time order, as a run does: each request's prefill
        window at its send and first token (``on_prefill``, perf stamps), its timings at its
        end, the extra windows as they open and close, and every ``tick_ns`` an interval taken
        (``final``: every finished request tagged, then the timeline pruned), after relaying
        the recorders' new windows to all of them when ``relay``. ``route(item)``: the indexes
        of the recorders that see an item directly; ``learning``: the recorders learn their
    plain step as a run's do (else overlap is taken for cause). Returns each recorder's
    totals."""
    events: list[tuple[int, int, str, object]] = []
    for req in world.requests:
        events += [
            (req.send, 0, "open", req),
            (req.stamps[0], 1, "first", req),
            (req.stamps[-1], 2, "end", req),
        ]
    for extra in world.extras:
        events += [(extra.start, 0, "x-open", extra), (extra.end, 1, "x-close", extra)]
    first = min(t for t, *_ in events)
    last = max(t for t, *_ in events)
    events += [(t, 9, "tick", None) for t in range(first + tick_ns, last + 2 * tick_ns, tick_ns)]
    events.sort(key=lambda event: (event[0], event[1]))
    totals = [MetricSet() for _ in recorders]
    for recorder in recorders:  # the brute force takes overlap for cause (explaining apart)
        recorder.tagger.scale = GapScale(learning=learning)
    if world.stall:
        for index in route(world.stall):
            recorders[index].on_stall(world.stall[0], world.stall[1])
    for t, _, what, item in events:
        if what == "tick":
            if relay:
                batch = [w for r in recorders for w in r.causes.take_outgoing()]
                for recorder in recorders:  # the master relays to every worker, echo too
                    recorder.causes.apply_wire(batch)
            for recorder, total in zip(recorders, totals, strict=True):
                delta = recorder.take_interval(final=True)
                decode_delta(encode_delta(delta)).add_to(total)  # as shipped to the master
            continue
        for index in route(item):
            recorder = recorders[index]
            if isinstance(item, Req):
                start = item.send
                if what == "open":
                    recorder.on_prefill(item.request_id, start, None, item.prompt)
                elif what == "first":
                    recorder.on_prefill(item.request_id, start, t, item.prompt)
                else:
                    recorder.record(item.timings())
            else:
                assert isinstance(item, Extra)
                end = None if what == "x-open" else item.end
                window = CauseWindow(
                    item.kind, item.window_id, item.start, end, item.size, item.burst
                )
                if item.kind == PREFILL:  # another process's: relayed by the master
                    recorder.causes.apply_wire([window.to_wire()])
                else:  # the server's windows, from the sampler
                    recorder.causes.add(window)
    return totals


def make_world(
    seed: int, requests: int, classes: tuple[str, ...] = ("chat",), processes: int = 1
) -> World:
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
        world.requests.append(
            Req(
                f"r{number}",
                classes[number % len(classes)],
                send,
                [int(s) for s in stamps],
                [int(c) for c in counts],
                int(rng.choice([50, 200, 1000, 4000, 16000])),
                process=(number // len(classes)) % processes,  # classes on both processes
                retransmits=int(rng.random() < 0.15),
            )
        )
    end = max(r.stamps[-1] for r in world.requests)
    span = end - base
    for number in range(8):
        start = base + int(rng.integers(0, span))
        world.extras.append(
            Extra(
                PREFILL,
                f"other{number}",
                start,
                start + int(rng.integers(20, 150)) * MS,
                float(rng.choice([500, 8000, 20000])),
            )
        )
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
            found.append(
                Gap(
                    int(to_us(itl[index : index + 1])[0]),
                    tpot_by_gap[index].tolist(),
                    causes,
                    round(sum(w[3] for w in prefills)),
                    len(prefills),
                    req.request_id,
                    index,
                    long,
                )
            )
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
            hit = sum(
                1 for causes in tail if (cause in causes if cause != UNEXPLAINED else not causes)
            )
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
    overlapping = [gap.prefill_tokens for gap in gaps if gap.prefill_tokens > 0]
    assert (tokens["all_gaps"], tokens["all_gaps_in_prefill"]) == (len(gaps), len(overlapping))
    if overlapping:  # the median of the gaps that overlapped a prefill, as a histogram says
        some = new_histogram()
        record_many(some, np.array(overlapping, dtype=np.int64))
        lower = some.get_value_at_percentile(100 * ((len(overlapping) + 1) // 2) / len(overlapping))
        assert tokens["all_gaps_in_prefill_median"] == lower
    for key, row in attribution["itl"].items():
        tail = [gap.prefill_tokens for gap in gaps if gap.itl_us > round(row["above_ms"] * 1000)]
        assert tokens[f"{key}_median"] == (int(np.median(tail)) if tail else None)
        some_tail = [tokens for tokens in tail if tokens > 0]
        assert tokens[f"{key}_in_prefill"] == (len(some_tail) if tail else None)
        median = int(np.median(some_tail)) if some_tail else None
        assert tokens[f"{key}_in_prefill_median"] == median


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
            assert cause_title(cause) in story
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
