"""One monotonic-to-wall-clock offset per process, so truth stamps compare with client stamps.

Timing is done on ``perf_counter_ns`` (CLOCK_MONOTONIC, shared by every process on the machine);
truth files carry wall-clock-scale values plus the offset, so subtracting it gives back the exact
monotonic stamp a client can compare with its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def _capture_offset() -> int:
    return time.time_ns() - time.perf_counter_ns()


@dataclass(frozen=True)
class Clock:
    """``offset_ns`` is captured once; ``wall(perf)`` = ``perf + offset_ns``."""

    offset_ns: int = field(default_factory=_capture_offset)

    def wall(self, perf_ns: int) -> int:
        return perf_ns + self.offset_ns


def s_to_ns(seconds: float) -> int:
    """Delays come from the timing model in seconds; the scheduler works in integer ns."""
    return round(seconds * 1e9)
