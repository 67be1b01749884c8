"""Run phases: warm-up/cool-down by time, and burst windows for interference attribution.

A *burst window* lasts from the send of a burst request to its first token (its prefill);
a burst request that failed before its first token made no prefill and opens no window
(it is reported with the end ``FAILED`` and counted apart).
A token gap is in the ``burst`` phase when it overlaps any burst window of the run (from
any worker), else ``steady``. Windows open at send time and close at the first token; a
window still open when a gap is tagged counts as open-ended. Gaps are tagged a little
after their request finished (``TAG_HOLD_S``) so windows reported by other workers have
arrived; wall-clock times (ns since the epoch) make windows comparable across processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

STEADY = "steady"
BURST = "burst"
PHASES = (STEADY, BURST)
TAG_HOLD_S = 2.0
FAILED = -1  # the end of a burst request's window when it failed before its first token


@dataclass
class RunClock:
    """The run's shared timeline (wall ns), for excluding warm-up and cool-down."""

    start_wall_ns: int
    duration_s: float
    warmup_s: float = 0.0
    cooldown_s: float = 0.0

    def excluded(self, send_wall_ns: int, end_wall_ns: int) -> str | None:
        """``warmup`` if sent during warm-up, ``cooldown`` if it ended in the cool-down."""
        if self.warmup_s and send_wall_ns < self.start_wall_ns + self.warmup_s * 1e9:
            return "warmup"
        cooldown_from = self.start_wall_ns + (self.duration_s - self.cooldown_s) * 1e9
        if self.cooldown_s and end_wall_ns > cooldown_from:
            return "cooldown"
        return None

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


class BurstWindows:
    """Every burst window of the run known to this process, by id."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, int | None]] = {}
        self._failed: set[str] = set()

    def __len__(self) -> int:
        return len(self._windows)

    @property
    def failed(self) -> int:
        """Burst requests that failed before their first token (no window)."""
        return len(self._failed)

    def update(self, window_id: str, start_wall_ns: int, end_wall_ns: int | None) -> None:
        """``end_wall_ns``: None while the prefill runs, ``FAILED`` when there was none."""
        if end_wall_ns == FAILED:
            self._windows.pop(window_id, None)
            self._failed.add(window_id)
            return
        known = self._windows.get(window_id)
        if window_id in self._failed or (
            known is not None and known[1] is not None and end_wall_ns is None
        ):
            return  # a late "open" message must not reopen a closed or failed window
        self._windows[window_id] = (start_wall_ns, end_wall_ns)

    def clear(self) -> None:
        self._windows.clear()
        self._failed.clear()

    def spans_wall_ns(self) -> list[tuple[int, int]]:
        """The closed windows, (start, end) wall ns, in time order."""
        return sorted((start, end) for start, end in self._windows.values() if end is not None)

    def durations_s(self) -> list[float]:
        return [(end - start) / 1e9 for start, end in self._windows.values() if end is not None]

    def overlaps(self, gap_starts: np.ndarray, gap_ends: np.ndarray) -> np.ndarray:
        """Boolean mask: which gaps [start, end] overlap any window (wall ns arrays)."""
        mask = np.zeros(gap_starts.shape, dtype=bool)
        if not self._windows or gap_starts.size == 0:
            return mask
        first, last = int(gap_starts.min()), int(gap_ends.max())
        for start, end in self._windows.values():
            end = end if end is not None else time.time_ns()
            if start <= last and end >= first:
                mask |= (gap_starts < end) & (gap_ends > start)
        return mask
