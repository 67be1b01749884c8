"""``perf_counter_ns`` and the wall clock: one offset, and when to take it.

Every latency is measured on ``time.perf_counter_ns()`` (CLOCK_MONOTONIC: one clock for all
processes of the machine, never stepped). The wall clock appears only where times must
line up with other things: stall and burst windows shared between processes, the
simulator's truth, and the kernel's receive stamps (``SO_TIMESTAMPNS`` is wall-clock).
The offset between the two is ``wall_minus_perf_ns()``. The policy on a step of the wall
clock (NTP, a suspended VM):

- ``WallClock`` takes the offset once and keeps it: every conversion of one process over
  a run then agrees with every other (the recorder's windows, the simulator's truth), and
  a step during the run moves nothing it converts;
- converting a kernel stamp takes the offset afresh for each request
  (``wall_minus_perf_ns()`` at the send), so a step spoils at most that request, and a
  kernel stamp more than 10 s from the read is not used (``wire.stamped_socket``).

A token's arrival is stamped on one of three clocks, named here (best first; README,
"Metric definitions").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

SEGMENT_CLOCK = "segment"  # each TCP segment's own kernel stamp (``wire.segment_stamps``)
KERNEL_CLOCK = "kernel"  # SO_TIMESTAMPNS: when a read's newest data reached the socket
USER_CLOCK = "user"  # perf_counter_ns when the read returned: includes event-loop delay
ARRIVAL_CLOCKS = (SEGMENT_CLOCK, KERNEL_CLOCK, USER_CLOCK)


def wall_minus_perf_ns() -> int:
    """The wall clock minus ``perf_counter_ns``, now."""
    return time.time_ns() - time.perf_counter_ns()


@dataclass(frozen=True)
class WallClock:
    """``offset_ns`` taken once; ``wall(perf)`` = ``perf + offset_ns``."""

    offset_ns: int = field(default_factory=wall_minus_perf_ns)

    def wall(self, perf_ns: int) -> int:
        return perf_ns + self.offset_ns


__all__ = [
    "ARRIVAL_CLOCKS",
    "KERNEL_CLOCK",
    "SEGMENT_CLOCK",
    "USER_CLOCK",
    "WallClock",
    "wall_minus_perf_ns",
]
