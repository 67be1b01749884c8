"""This process's garbage collections, kept as windows (on the stamp clock, ``common.clock``),
so that a client stall during which the collector ran is named a client GC: a reader then knows to
tune ``gc`` (or ``quiet_loop``) rather than add workers.

``gc.callbacks`` calls us at each collection's start and stop: two Python calls a
collection, a few microseconds; the windows kept are the last ``KEPT`` (a stall is looked
up at its end, a tick after the collection ended).
"""

from __future__ import annotations

import gc
from collections import deque
from typing import Any

from tpot_locust.common.clock import stamp_ns

KEPT = 512  # collections remembered: young ones run tens a second, a stall is looked up at once


class CollectorWatch:
    """The collections of this process: ``during`` says whether one ran inside a span."""

    def __init__(self) -> None:
        self._windows: deque[tuple[int, int, int]] = deque(maxlen=KEPT)  # start, end, gen
        self._started: tuple[int, int] | None = None
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = stamp_ns()
        if phase == "start":
            self._started = (now, int(info.get("generation", 0)))
        elif self._started is not None:
            start, generation = self._started
            self._windows.append((start, now, generation))
            self._started = None

    def during(self, start_ns: int, end_ns: int) -> int | None:
        """The oldest generation collected in a collection that overlapped the span, or
        None when the collector did not run in it."""
        found = None
        for start, end, generation in reversed(self._windows):
            if end < start_ns:
                break  # in time order: the rest ended earlier still
            if start <= end_ns:
                found = generation if found is None else max(found, generation)
        return found
