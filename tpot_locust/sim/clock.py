"""One monotonic-to-wall-clock offset per process, so truth stamps compare with client stamps.

Timing is done on ``perf_counter_ns`` (CLOCK_MONOTONIC, shared by every process on the machine);
truth files carry wall-clock-scale values plus the offset, so subtracting it gives back the exact
monotonic stamp a client can compare with its own.
"""

from __future__ import annotations

from ..common.clock import WallClock

# The simulator's truth converts with one offset for the whole run (common.clock's policy).
Clock = WallClock


def s_to_ns(seconds: float) -> int:
    """Delays come from the timing model in seconds; the scheduler works in integer ns."""
    return round(seconds * 1e9)
