"""The cause timeline (``metrics.causes``) against brute force: overlap counting, the update
rules of windows (open, close, fail, relayed twice), pruning, and the prefill archive."""

from __future__ import annotations

import json
from dataclasses import dataclass

import msgpack
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.metrics.causes import (
    CLIENT_STALL,
    KV_PRESSURE,
    NETWORK,
    PREEMPTION,
    PREFILL,
    QUEUEING,
    CauseTimeline,
    CauseWindow,
    PrefillArchive,
)

KINDS = (PREFILL, PREEMPTION, KV_PRESSURE, QUEUEING, NETWORK, CLIENT_STALL)
EPOCH_NS = 1_700_000_000_000_000_000  # wall-clock ns of today: int64 arithmetic near its top
INF = float("inf")


@dataclass(frozen=True)
class Drawn:
    """One window of a test: added open first (then closed) when ``opened_first``."""

    kind: str
    start: int
    length: int | None  # None: still open
    size: int
    burst: bool
    opened_first: bool


drawn_windows = st.lists(
    st.builds(
        Drawn,
        kind=st.sampled_from(KINDS),
        start=st.integers(0, 60),
        length=st.one_of(st.none(), st.integers(0, 30)),  # open, zero-length, closed
        size=st.integers(0, 3000),
        burst=st.booleans(),
        opened_first=st.booleans(),
    ),
    max_size=25,
)
drawn_gaps = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20)), min_size=1, max_size=30)


def add_drawn(timeline: CauseTimeline, windows: list[Drawn], base: int, first: int = 0) -> None:
    for number, drawn in enumerate(windows, start=first):
        window_id, start = f"w{number}", base + drawn.start
        if drawn.opened_first or drawn.length is None:
            timeline.add(CauseWindow(drawn.kind, window_id, start, None, drawn.size, drawn.burst))
        if drawn.length is not None:
            end = start + drawn.length
            timeline.add(CauseWindow(drawn.kind, window_id, start, end, drawn.size, drawn.burst))


def reference(windows: list[Drawn], base: int, gap: tuple[int, int], long_tokens: int) -> dict:
    """Brute force: every window with start < gap end and end > gap start overlaps it; an
    open window reaches everything later; a closed window of no length is empty."""
    start, end = gap
    kinds: set[str] = set()
    tokens = requests = 0
    in_burst = False
    for drawn in windows:
        if drawn.length == 0:
            continue  # empty: documented as overlapping nothing (``_apply``)
        w_start = base + drawn.start
        w_end = INF if drawn.length is None else w_start + drawn.length
        if w_start < end and w_end > start:
            kinds.add(drawn.kind)
            if drawn.kind == PREFILL:
                tokens += drawn.size
                requests += 1
                in_burst |= drawn.burst or drawn.size >= long_tokens
    return {"kinds": kinds, "tokens": tokens, "requests": requests, "in_burst": in_burst}


def check_tags(
    timeline: CauseTimeline, windows: list[Drawn], gaps: list[tuple[int, int]], base: int
) -> None:
    starts = np.array([base + a for a, _ in gaps], dtype=np.int64)
    ends = np.array([base + a + length for a, length in gaps], dtype=np.int64)
    found = timeline.tags(starts, ends)
    expected = [
        reference(windows, base, (int(a), int(b)), timeline.long_prompt_tokens)
        for a, b in zip(starts, ends, strict=True)
    ]
    for kind in KINDS:
        wanted = [kind in e["kinds"] for e in expected]
        if any(wanted):
            assert found.masks[kind].tolist() == wanted, kind
        else:
            assert kind not in found.masks, kind  # a kind that tags nothing has no mask
    assert set(found.masks) <= set(KINDS)
    assert found.prefill_tokens.tolist() == [e["tokens"] for e in expected]
    assert found.prefill_requests.tolist() == [e["requests"] for e in expected]
    assert found.in_burst.tolist() == [e["in_burst"] for e in expected]
    assert found.prefill_tokens.dtype == np.int64 and found.in_burst.dtype == bool


@settings(max_examples=300, deadline=None)
@given(
    windows=drawn_windows,
    gaps=drawn_gaps,
    base=st.sampled_from([0, EPOCH_NS]),
    long_tokens=st.sampled_from([1, 1500, 2048]),
)
def test_tags_equal_brute_force(
    windows: list[Drawn], gaps: list[tuple[int, int]], base: int, long_tokens: int
) -> None:
    timeline = CauseTimeline(long_prompt_tokens=long_tokens)
    add_drawn(timeline, windows, base)
    check_tags(timeline, windows, gaps, base)


@settings(max_examples=100, deadline=None)
@given(first=drawn_windows, second=drawn_windows, gaps=drawn_gaps)
def test_tags_follow_windows_added_after_a_first_tagging(
    first: list[Drawn], second: list[Drawn], gaps: list[tuple[int, int]]
) -> None:
    """The sorted index is rebuilt after each change: tags never read a stale one."""
    timeline = CauseTimeline()
    add_drawn(timeline, first, EPOCH_NS)
    check_tags(timeline, first, gaps, EPOCH_NS)
    add_drawn(timeline, second, EPOCH_NS, first=len(first))
    check_tags(timeline, first + second, gaps, EPOCH_NS)


def test_tags_of_an_empty_timeline_and_of_no_gaps() -> None:
    timeline = CauseTimeline()
    found = timeline.tags(np.array([1, 5], dtype=np.int64), np.array([2, 9], dtype=np.int64))
    assert found.masks == {} and found.prefill_tokens.tolist() == [0, 0]
    assert found.prefill_requests.tolist() == [0, 0] and found.in_burst.tolist() == [False] * 2
    timeline.add(CauseWindow(PREFILL, "a", 0, None, 10.0))
    none = timeline.tags(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert none.prefill_tokens.size == 0 and none.in_burst.size == 0


def test_a_prefill_of_the_long_prompt_size_makes_the_burst_phase() -> None:
    timeline = CauseTimeline(long_prompt_tokens=2048)
    timeline.add(prefill("short", 0, 100, 2047.0))
    timeline.add(prefill("long", 200, 300, 2048.0))
    timeline.add(prefill("burst", 400, 500, 10.0, burst=True))  # scheduled: whatever its size
    at = np.array([50, 250, 450], dtype=np.int64)
    assert timeline.tags(at, at).in_burst.tolist() == [False, True, True]


def test_edges_touching_a_gap_do_not_overlap_it_but_a_zero_gap_inside_does() -> None:
    timeline = CauseTimeline()
    timeline.add(CauseWindow(PREFILL, "a", 100, 200, 7.0))
    starts = np.array([50, 200, 100, 150, 199, 100, 99], dtype=np.int64)
    ends = np.array([100, 250, 100, 150, 199, 200, 99], dtype=np.int64)
    # ends at the window's start / starts at its end: no; zero gap at its start: no (the
    # window is [start, end) for an instant); zero gaps strictly inside: yes; all of it: yes
    assert timeline.tags(starts, ends).prefill_tokens.tolist() == [0, 0, 0, 7, 7, 7, 0]


# --- the update rules ---------------------------------------------------------------


def prefill(
    window_id: str, start: int, end: int | None, size: float = 100.0, burst: bool = False
) -> CauseWindow:
    return CauseWindow(PREFILL, window_id, start, end, size, burst)


def tokens_at(timeline: CauseTimeline, *points: int) -> list[int]:
    """Prompt tokens in prefill for a zero-length gap at each point."""
    at = np.array(points, dtype=np.int64)
    return timeline.tags(at, at).prefill_tokens.tolist()


def test_a_late_open_after_a_close_does_not_reopen_it() -> None:
    timeline = CauseTimeline()
    timeline.sharing = True
    timeline.add(prefill("a", 100, None, 10.0))
    timeline.add(prefill("a", 100, 200, 10.0))
    timeline.add(prefill("a", 100, None, 10.0))  # relayed late, from another process
    timeline.add(prefill("a", 50, None, 99.0))  # even one with another start and size
    assert tokens_at(timeline, 75, 150, 250, 10**12) == [0, 10, 0, 0]
    timeline.add(prefill("a", 100, 300, 10.0))  # nor does a second close move its end
    assert tokens_at(timeline, 250) == [0]
    assert len(timeline) == 1
    # only the open and the close that changed something go to the other processes
    assert timeline.take_outgoing() == [
        prefill("a", 100, None, 10.0).to_wire(),
        prefill("a", 100, 200, 10.0).to_wire(),
    ]


def test_a_close_without_an_open_adds_the_window() -> None:
    timeline = CauseTimeline()
    timeline.apply_wire([prefill("b", 100, 200, 5.0).to_wire()])  # its open was lost
    assert tokens_at(timeline, 150, 250) == [5, 0] and len(timeline) == 1


def test_fail_removes_the_window_and_blocks_later_ones() -> None:
    timeline = CauseTimeline()
    timeline.sharing = True
    timeline.add(prefill("x", 100, None, 500.0, burst=True))
    assert tokens_at(timeline, 150) == [500]
    timeline.fail(PREFILL, "x", burst=True)
    assert len(timeline) == 0 and tokens_at(timeline, 150, 10**12) == [0, 0]
    timeline.add(prefill("x", 100, None, 500.0, burst=True))  # a late open: refused
    timeline.add(prefill("x", 100, 200, 500.0, burst=True))  # and a late close
    timeline.fail(PREFILL, "x", burst=True)  # relayed again: counted once
    assert len(timeline) == 0 and tokens_at(timeline, 150) == [0]
    assert timeline.bursts.failed == 1 and len(timeline.bursts) == 0
    outgoing = timeline.take_outgoing()
    assert [item[3] for item in outgoing] == [None, -1]  # the open, then the failure, once
    # another window is not affected
    timeline.add(prefill("y", 100, 200, 3.0))
    assert tokens_at(timeline, 150) == [3]


def test_a_failure_relayed_before_its_open_still_blocks_it() -> None:
    timeline = CauseTimeline()
    timeline.apply_wire(
        [CauseWindow(PREFILL, "z", 0, -1).to_wire(), prefill("z", 100, None).to_wire()]
    )
    assert len(timeline) == 0 and tokens_at(timeline, 150) == [0]


def server_and_prefill_batch() -> tuple[CauseTimeline, list[list]]:
    """A sharing timeline's batch: opens, closes, a failure, server windows, a burst."""
    source = CauseTimeline()
    source.sharing = True
    source.add(prefill("p1", 100, None, 2000.0))
    source.add(prefill("p2", 120, None, 300.0, burst=True))
    source.add(prefill("p1", 100, 180, 2000.0))
    source.add(prefill("p3", 130, None, 40.0))
    source.fail(PREFILL, "p3")
    source.add(prefill("p2", 120, 400, 300.0, burst=True))
    source.add(CauseWindow(PREEMPTION, "s1", 150, 160, 2.0))
    source.add(CauseWindow(KV_PRESSURE, "s2", 0, 1000, 0.97))
    source.add(prefill("p4", 500, None, 16000.0))  # still open
    return source, source.take_outgoing()


def snapshot(timeline: CauseTimeline) -> tuple:
    grid = np.arange(0, 1100, 5, dtype=np.int64)
    found = timeline.tags(grid, grid + 7)
    masks = {kind: mask.tolist() for kind, mask in found.masks.items()}
    archive = timeline.archive
    return (
        len(timeline),
        masks,
        found.prefill_tokens.tolist(),
        found.prefill_requests.tolist(),
        found.in_burst.tolist(),
        timeline.bursts.spans_wall_ns(),
        timeline.bursts.failed,
        None if archive is None else (archive.starts, archive.ends, archive.sizes),
    )


def test_applying_the_same_wire_batch_twice_changes_nothing() -> None:
    source, batch = server_and_prefill_batch()
    once, twice = CauseTimeline(), CauseTimeline()
    once.archive, twice.archive = PrefillArchive(), PrefillArchive()
    once.apply_wire(batch)
    twice.apply_wire(batch)
    twice.apply_wire(batch)
    twice.apply_wire(list(reversed(batch)))  # and relayed again out of order
    assert snapshot(once) == snapshot(twice)
    assert len(once.archive) == 2  # p1, p2: closed once each (p3 failed, p4 open)
    assert once.bursts.spans_wall_ns() == [(120, 400)]
    # the source gets its own batch back from the master: nothing changes, nothing queued
    before = snapshot(source)
    source.apply_wire(batch)
    assert snapshot(source) == before and source.take_outgoing() == []
    # and the receivers, fed the source's batch, tag as the source does
    assert snapshot(once)[1:5] == before[1:5]


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    window_id=st.text(max_size=20),
    start=st.integers(0, 2**63 - 1),
    end=st.one_of(st.none(), st.integers(-1, 2**63 - 1)),
    size=st.one_of(st.integers(0, 10**7).map(float), st.floats(0, 1)),
    burst=st.booleans(),
)
def test_wire_round_trip(
    kind: str, window_id: str, start: int, end: int | None, size: float, burst: bool
) -> None:
    window = CauseWindow(kind, window_id, start, end, size, burst)
    assert CauseWindow.from_wire(window.to_wire()) == window
    as_json = json.loads(json.dumps(window.to_wire()))
    assert CauseWindow.from_wire(as_json) == window
    as_msgpack = msgpack.unpackb(msgpack.packb(window.to_wire()))
    assert CauseWindow.from_wire(as_msgpack) == window


def test_take_outgoing_returns_each_own_window_once_and_never_relayed_ones() -> None:
    timeline = CauseTimeline()
    timeline.sharing = True
    timeline.add(prefill("own", 100, None))
    timeline.add(prefill("own", 100, 200))
    timeline.add(CauseWindow(PREEMPTION, "srv", 10, 20, 1.0))
    timeline.add(CauseWindow(CLIENT_STALL, "stall", 10, 20), share=False)  # local only
    timeline.apply_wire(
        [prefill("theirs", 100, None).to_wire(), prefill("theirs", 100, 300).to_wire()]
    )
    taken = timeline.take_outgoing()
    assert [CauseWindow.from_wire(item).window_id for item in taken] == ["own", "own", "srv"]
    assert timeline.take_outgoing() == []
    timeline.apply_wire(taken)  # its own, relayed back: not queued again
    timeline.add(prefill("own", 100, 200))  # nor a repeated close
    assert timeline.take_outgoing() == []
    assert len(timeline) == 4  # own, srv, stall, theirs
    assert tokens_at(timeline, 250) == [100]  # "theirs" is known, though not re-queued


def test_an_empty_window_is_neither_kept_nor_queued() -> None:
    timeline = CauseTimeline()
    timeline.sharing = True
    timeline.add(prefill("empty", 100, 100))
    timeline.add(prefill("backwards", 100, 90))
    assert len(timeline) == 0 and timeline.take_outgoing() == []


def test_an_open_window_closed_with_no_length_does_not_stay_open() -> None:
    timeline = CauseTimeline()
    timeline.add(prefill("a", 100, None, 500.0))
    timeline.add(prefill("a", 100, 100, 500.0))  # first token stamped at the send's ns
    assert tokens_at(timeline, 10**12) == [0] and len(timeline) == 0
    timeline.add(prefill("b", 100, None, 500.0))
    timeline.add(prefill("b", 100, 90, 500.0))  # a clock step: before its send
    assert tokens_at(timeline, 10**12) == [0] and len(timeline) == 0


def test_the_other_processes_learn_that_an_open_window_closed_with_no_length() -> None:
    """Its open went to the others: what removes it must go too, or it stays open there."""
    here, there = CauseTimeline(), CauseTimeline()
    here.sharing = True
    here.add(prefill("a", 100, None, 500.0))
    there.apply_wire(here.take_outgoing())
    assert tokens_at(there, 10**12) == [500]
    here.add(prefill("a", 100, 100, 500.0))
    there.apply_wire(here.take_outgoing())
    assert tokens_at(there, 10**12) == [0]


def test_a_late_open_after_a_close_with_no_length_does_not_reopen_it() -> None:
    timeline = CauseTimeline()
    timeline.add(prefill("a", 100, None, 500.0))
    timeline.add(prefill("a", 100, 100, 500.0))
    timeline.apply_wire([prefill("a", 100, None, 500.0).to_wire()])  # the master's echo
    assert tokens_at(timeline, 10**12) == [0]


# --- prune and clear ----------------------------------------------------------------


def test_prune_forgets_only_closed_windows_that_ended_before_the_horizon() -> None:
    timeline = CauseTimeline()
    timeline.archive = PrefillArchive()
    timeline.add(prefill("old", 0, 100, 1.0, burst=True))
    timeline.add(prefill("at", 50, 150, 2.0))  # ends at the horizon itself: kept
    timeline.add(prefill("later", 60, 200, 4.0))
    timeline.add(prefill("open", 0, None, 8.0))  # opened long before: kept, it still runs
    timeline.add(CauseWindow(PREEMPTION, "srv", 10, 90, 1.0))
    timeline.add(CauseWindow(KV_PRESSURE, "kv", 10, None, 0.99))
    assert tokens_at(timeline, 80) == [15]
    timeline.prune(150)
    assert len(timeline) == 4
    assert tokens_at(timeline, 149, 160, 10**12) == [14, 12, 8]
    found = timeline.tags(np.array([0], dtype=np.int64), np.array([10**12], dtype=np.int64))
    assert set(found.masks) == {PREFILL, KV_PRESSURE}
    # the run's facts keep what tagging forgot
    assert timeline.bursts.spans_wall_ns() == [(0, 100)]
    assert len(timeline.archive) == 3
    timeline.prune(10**15)  # far later: only the open ones remain
    assert len(timeline) == 2 and tokens_at(timeline, 10**13) == [8]
    assert timeline.bursts.spans_wall_ns() == [(0, 100)]


def test_a_late_open_after_a_prune_does_not_reopen_it() -> None:
    """The master's echo of a batch split across two relays: the open may come back after
    the window closed and was pruned here."""
    timeline = CauseTimeline()
    timeline.add(prefill("a", 100, None))
    timeline.add(prefill("a", 100, 200))
    timeline.prune(1000)
    assert len(timeline) == 0
    timeline.apply_wire([prefill("a", 100, None).to_wire()])
    assert tokens_at(timeline, 10**12) == [0]


def test_a_batch_relayed_again_after_a_prune_changes_no_facts() -> None:
    _, batch = server_and_prefill_batch()
    timeline = CauseTimeline()
    timeline.archive = PrefillArchive()
    timeline.apply_wire(batch)
    facts = (timeline.bursts.spans_wall_ns(), timeline.bursts.failed, len(timeline.archive))
    timeline.prune(10**6)  # every closed window forgotten
    timeline.apply_wire(batch)
    assert (timeline.bursts.spans_wall_ns(), timeline.bursts.failed, len(timeline.archive)) == facts
    assert tokens_at(timeline, 10**7) == [16000]  # only p4, still open


def test_clear_resets_everything() -> None:
    timeline = CauseTimeline()
    timeline.sharing = True
    timeline.archive = PrefillArchive()
    timeline.add(prefill("a", 0, 100, burst=True))
    timeline.add(prefill("b", 0, None))
    timeline.fail(PREFILL, "f", burst=True)
    timeline.clear()
    assert len(timeline) == 0 and timeline.take_outgoing() == []
    assert len(timeline.bursts) == 0 and timeline.bursts.failed == 0
    assert timeline.archive is not None and len(timeline.archive) == 0
    assert tokens_at(timeline, 50) == [0]
    timeline.add(prefill("f", 0, 100, 9.0))  # failed in the test before: a new test's id
    assert tokens_at(timeline, 50) == [9]
    plain = CauseTimeline()
    plain.clear()
    assert plain.archive is None  # only the reporting process keeps an archive
