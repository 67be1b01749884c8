"""The process's one clock for every stamp, and how the wall clock relates to it.

Every stamp this package makes (a request's send, each token's arrival, a stall, a
prefill window) is on one clock, ``stamp_ns()``: ``time.perf_counter_ns()`` (CLOCK_MONOTONIC,
never stepped) moved onto the wall clock's scale by one offset taken when the process
began, so a stamp reads as nanoseconds since the epoch, lines up with other processes'
windows, the simulator's truth and a server's logs, and a latency (a difference of two
stamps) is never moved by a step of the wall clock (NTP, a suspended VM). A token's stamp
goes from the wire to the report on it, converted nowhere in between. The policy on a step:

- the offset is kept for the process's life: every stamp of one process agrees with every
  other over a run, and a step during the run moves none of them (the windows other
  processes send then lie off by the step: they are on their own clocks);
- the kernel's receive stamps are wall clock (``SO_TIMESTAMPNS``); converting one takes
  the wall's drift from this clock afresh for each request (``wall_drift_ns()`` at the
  send), so a step spoils at most that request, and a kernel stamp more than 10 s from the
  read is not used (``wire.stamped_socket``).

A token's arrival is stamped on one of three clocks, named here (best first; README,
"Metric definitions").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

SEGMENT_CLOCK = "segment"  # each TCP segment's own kernel stamp (``wire.segment_stamps``)
KERNEL_CLOCK = "kernel"  # SO_TIMESTAMPNS: when a read's newest data reached the socket
USER_CLOCK = "user"  # ``stamp_ns()`` when the read returned: includes event-loop delay
ARRIVAL_CLOCKS = (SEGMENT_CLOCK, KERNEL_CLOCK, USER_CLOCK)


def wall_minus_perf_ns() -> int:
    """The wall clock minus ``perf_counter_ns``, now."""
    return time.time_ns() - time.perf_counter_ns()


_OFFSET_NS = wall_minus_perf_ns()  # once a process: ``stamp_ns``'s place on the wall's scale


def stamp_ns() -> int:
    """The stamp clock, now: ``perf_counter_ns`` plus the process's one offset (wall ns)."""
    return time.perf_counter_ns() + _OFFSET_NS


def from_perf_ns(perf_ns: int) -> int:
    """A ``perf_counter_ns`` reading of this machine (another process's too) on the stamp
    clock."""
    return perf_ns + _OFFSET_NS


def wall_drift_ns() -> int:
    """How far the wall clock moved from the stamp clock since the process began (0 but
    for a step or a slew): a kernel stamp less this is on the stamp clock."""
    return wall_minus_perf_ns() - _OFFSET_NS


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
    "from_perf_ns",
    "stamp_ns",
    "wall_drift_ns",
    "wall_minus_perf_ns",
]
