"""The largest token gaps of the run, each with what overlapped it: the tail's stories.

Percentile shares come from histograms (exact at any size); a *story* needs the gap
itself: when it ended, which request it was, which causes and how many prompt tokens were
in prefill at that moment. Each process keeps the ``TAIL_GAPS_KEPT`` largest gaps it ever
saw per user class and ships only the ones that entered that set since its last report;
the master keeps the largest of all. The run's top ``TAIL_GAPS_KEPT`` is always in the
union of every process's own, so the merge is exact: with 1,000 kept, the gaps above P99.9
of up to a million samples are all there, each with its story.
"""

from __future__ import annotations

import bisect
import operator
from typing import Any

import numpy as np

TAIL_GAPS_KEPT = 1000
WORST_GAPS_SHOWN = 10  # the summary's ``worst_gaps``: the first of them


def merge_tail(kept: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``TAIL_GAPS_KEPT`` largest of both (``kept`` sorted largest first; a tie keeps
    ``kept``'s gap first, then ``new``'s in their order).

    A master merges every worker's new gaps each second: once its set is full, only those
    above its smallest can enter, usually a few, each put in place by bisection (a full
    merge of the 1,000 was most of a busy report's cost)."""
    if not new:
        return kept
    if len(kept) >= TAIL_GAPS_KEPT:
        floor = kept[TAIL_GAPS_KEPT - 1]["ms"]
        new = [gap for gap in new if gap["ms"] > floor]  # the rest would rank past the end
        if not new:
            return kept[:TAIL_GAPS_KEPT]
    if len(new) > _FEW:
        return sorted(kept + new, key=_SIZE, reverse=True)[:TAIL_GAPS_KEPT]  # stable
    merged = list(kept)
    for gap in sorted(new, key=_SIZE, reverse=True):
        bisect.insort_right(merged, gap, key=_descending)  # after its equals: stable
    del merged[TAIL_GAPS_KEPT:]
    return merged


_SIZE = operator.itemgetter("ms")
_FEW = 32  # more new gaps than this: one stable sort of both beats inserting each


def _descending(gap: dict[str, Any]) -> float:
    size: float = gap["ms"]
    return -size


class TailFloor:
    """One process's bar for a class's tail: the smallest of the largest gaps it kept."""

    def __init__(self) -> None:
        self._kept = np.zeros(0, dtype=np.int64)  # nanoseconds, at most TAIL_GAPS_KEPT

    def candidates(self, itl_ns: np.ndarray) -> np.ndarray:
        """Indexes of the gaps that enter the kept set (and enter them), in bulk."""
        kept = self._kept
        if kept.size >= TAIL_GAPS_KEPT:
            above = np.flatnonzero(itl_ns > kept.min())
            if not above.size:
                return above  # nearly always, once the tail is known
        union = np.concatenate((kept, itl_ns))
        if union.size <= TAIL_GAPS_KEPT:
            self._kept = union
            return np.arange(itl_ns.size)
        cut = union.size - TAIL_GAPS_KEPT
        bar = np.partition(union, cut)[cut]  # the K-th largest of both
        chosen = np.flatnonzero(itl_ns >= bar)
        self._kept = np.partition(union, cut)[cut:]
        return chosen

    def clear(self) -> None:
        self._kept = np.zeros(0, dtype=np.int64)
