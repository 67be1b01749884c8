"""The kept largest gaps (``metrics.tail_gaps``): the merge keeps exactly the largest, and a
process's floor never drops a gap of its running top."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.metrics import tail_gaps
from tpot_locust.metrics.tail_gaps import TAIL_GAPS_KEPT, TailFloor, merge_tail

batches = st.lists(st.lists(st.integers(0, 60), max_size=25), max_size=12)  # many ties


def gaps_of(values: list[int], batch: int) -> list[dict]:
    return [{"ms": value / 4, "batch": batch, "index": i} for i, value in enumerate(values)]


def check_merge(values_by_batch: list[list[int]], kept_size: int) -> None:
    kept: list[dict] = []
    seen: list[dict] = []
    for number, values in enumerate(values_by_batch):
        batch = gaps_of(values, number)
        seen += batch
        kept = merge_tail(kept, batch)
        assert [gap["ms"] for gap in kept] == sorted((g["ms"] for g in seen), reverse=True)[
            :kept_size
        ]
        # each kept gap is one that came in, once (no copies, nothing made up)
        assert len({id(gap) for gap in kept}) == len(kept)
        assert all(any(gap is s for s in seen) for gap in kept)


@settings(max_examples=300, deadline=None)
@given(values_by_batch=batches, kept_size=st.integers(1, 8))
def test_merge_keeps_exactly_the_largest_of_any_batches(
    values_by_batch: list[list[int]], kept_size: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tail_gaps, "TAIL_GAPS_KEPT", kept_size)
        check_merge(values_by_batch, kept_size)


def test_merge_at_the_real_size() -> None:
    rng = np.random.default_rng(7)
    sizes = [0, 1, 999, 1000, 1001, 5000, 3, 2500, 0, 700]
    check_merge([rng.integers(0, 10_000, size).tolist() for size in sizes], TAIL_GAPS_KEPT)


def test_merge_of_two_processes_tops_is_the_top_of_all() -> None:
    """The master's merge of two workers' kept sets equals one process that saw it all."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 10**6, 6000).tolist()
    all_gaps = gaps_of(values, 0)
    one: list[dict] = []
    for start in range(0, 6000, 700):
        one = merge_tail(one, all_gaps[start : start + 700])
    first = merge_tail([], all_gaps[::2])
    second = merge_tail([], all_gaps[1::2])
    wanted = [gap["ms"] for gap in one]
    assert [gap["ms"] for gap in merge_tail(first, second)] == wanted
    assert [gap["ms"] for gap in merge_tail(second, first)] == wanted
    assert len(one) == TAIL_GAPS_KEPT


def heap_merge(kept: list[dict], new: list[dict], size: int) -> list[dict]:
    """``merge_tail`` as it was before issue 45 (a heap merge of both): the reference."""
    if not new:
        return kept
    merged = heapq.merge(
        kept, sorted(new, key=lambda g: g["ms"], reverse=True), key=lambda g: g["ms"], reverse=True
    )
    return [gap for gap, _ in zip(merged, range(size), strict=False)]


@settings(max_examples=300, deadline=None)
@given(
    values_by_batch=st.lists(st.lists(st.integers(0, 30), max_size=80), max_size=10),
    kept_size=st.integers(1, 60),
)
def test_merge_keeps_the_same_gaps_in_the_same_order_as_a_heap_merge(
    values_by_batch: list[list[int]], kept_size: int
) -> None:
    """Ties included (which of two equal gaps is kept, and in what order): the filter by
    floor, the insertion of a few and the sort of many each keep what the heap merge kept."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tail_gaps, "TAIL_GAPS_KEPT", kept_size)
        ours: list[dict] = []
        theirs: list[dict] = []
        for number, values in enumerate(values_by_batch):
            batch = gaps_of(values, number)
            ours, theirs = merge_tail(ours, batch), heap_merge(theirs, batch, kept_size)
            assert [id(gap) for gap in ours] == [id(gap) for gap in theirs]


def test_merge_at_the_real_size_ties_as_a_heap_merge() -> None:
    rng = np.random.default_rng(5)
    ours: list[dict] = []
    theirs: list[dict] = []
    for number, size in enumerate([300, 40, 900, 33, 2500, 5, 1200, 0, 64]):
        batch = gaps_of(rng.integers(0, 50, size).tolist(), number)  # ties everywhere
        ours, theirs = merge_tail(ours, batch), heap_merge(theirs, batch, TAIL_GAPS_KEPT)
        assert [id(gap) for gap in ours] == [id(gap) for gap in theirs]


def floor_run(values_by_batch: list[list[int]], kept_size: int) -> None:
    floor = TailFloor()
    chosen_values: list[int] = []
    seen: list[int] = []
    for values in values_by_batch:
        itl = np.array(values, dtype=np.int64)
        chosen = floor.candidates(itl)
        assert len(set(chosen.tolist())) == chosen.size  # each index once
        assert all(0 <= i < itl.size for i in chosen.tolist())
        seen += values
        chosen_values += itl[chosen].tolist()
        top = sorted(seen, reverse=True)[:kept_size]
        # nothing of the running top is missed: what was shipped holds it
        assert sorted(chosen_values, reverse=True)[:kept_size] == top
        # a gap strictly above the running top's smallest is chosen in the batch it came in
        if len(top) == kept_size:
            above = [i for i, v in enumerate(values) if v > top[-1]]
            assert set(above) <= set(chosen.tolist())
        else:
            assert chosen.size == itl.size  # top not full yet: every gap enters


@settings(max_examples=300, deadline=None)
@given(values_by_batch=batches, kept_size=st.integers(1, 8))
def test_floor_never_misses_a_gap_of_the_running_top(
    values_by_batch: list[list[int]], kept_size: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tail_gaps, "TAIL_GAPS_KEPT", kept_size)
        floor_run(values_by_batch, kept_size)


def test_floor_at_the_real_size_and_its_clear() -> None:
    rng = np.random.default_rng(11)
    batches_ = [rng.integers(0, 10**8, size).tolist() for size in (10, 995, 1, 4000, 0, 2000)]
    batches_.append([10**9] * 3 + [0] * 50)  # new largest, ties, and nothing new
    floor_run(batches_, TAIL_GAPS_KEPT)
    floor = TailFloor()
    floor.candidates(np.arange(TAIL_GAPS_KEPT, dtype=np.int64) + 100)
    assert floor.candidates(np.array([50], dtype=np.int64)).size == 0  # under the floor
    floor.clear()
    assert floor.candidates(np.array([50], dtype=np.int64)).tolist() == [0]


def test_floor_feeding_merge_equals_the_top_of_all() -> None:
    """A process ships only its floor's candidates; the merge of them is the exact top."""
    rng = np.random.default_rng(5)
    floor, kept, every = TailFloor(), [], []
    for _ in range(20):
        itl = rng.integers(0, 10**7, int(rng.integers(0, 400))).astype(np.int64)
        gaps = gaps_of(itl.tolist(), 0)
        every += gaps
        kept = merge_tail(kept, [gaps[i] for i in floor.candidates(itl).tolist()])
    top = sorted((g["ms"] for g in every), reverse=True)[:TAIL_GAPS_KEPT]
    assert [g["ms"] for g in kept] == top
