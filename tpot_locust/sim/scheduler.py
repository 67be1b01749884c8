"""One timer for all streams: a heap of due times drives every token event.

A sleep per stream would cost a timer handle and a task switch per token; here one
``call_at`` handle is armed for the earliest due time and each wake serves every stream that is
due. Streams return their next *scheduled* due time, so lateness never accumulates as drift.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Scheduled(Protocol):
    @property
    def active(self) -> bool:
        """False once finished or aborted; its heap entry is then skipped (lazy deletion)."""
        ...

    def on_due(self, now_ns: int) -> int | None:
        """Emit everything due at ``now_ns``; return the next due time, or None when done."""
        ...


class Scheduler:
    """Heap of ``(due_ns, seq, item)`` on the ``perf_counter_ns`` clock."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[int, int, Scheduled]] = []
        self._seq = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_ns: int | None = None

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, item: Scheduled, due_ns: int) -> None:
        heapq.heappush(self._heap, (due_ns, next(self._seq), item))
        if self._armed_ns is None or due_ns < self._armed_ns:
            self._arm(due_ns)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._armed_ns = None, None
        self._heap.clear()

    def _arm(self, due_ns: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        # loop.time() and perf_counter may be different clocks: convert via the remaining delay.
        delay_s = (due_ns - time.perf_counter_ns()) / 1e9
        self._handle = self._loop.call_at(self._loop.time() + delay_s, self._fire)
        self._armed_ns = due_ns

    def _fire(self) -> None:
        self._handle, self._armed_ns = None, None
        heap, push, pop, seq = self._heap, heapq.heappush, heapq.heappop, self._seq
        now = time.perf_counter_ns()
        # Serve one snapshot of due items, then return to the loop so I/O is not starved.
        while heap and heap[0][0] <= now:
            item = pop(heap)[2]
            if not item.active:
                continue
            due = item.on_due(now)
            if due is not None:
                push(heap, (due, next(seq), item))
        while heap and not heap[0][2].active:
            pop(heap)
        if heap:
            self._arm(heap[0][0])
